package lease

import (
	"errors"
	"math"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIDStringRoundTrip(t *testing.T) {
	for _, id := range []ID{
		NewID(1, 0, 0),
		NewID(0x9f3c0a1b2c3d4e5f, 42, 3),
		NewID(^uint64(0), ^uint64(0), ^uint32(0)),
	} {
		s := id.String()
		back, err := ParseID(s)
		if err != nil || back != id {
			t.Errorf("ParseID(%q) = %v, %v; want %v", s, back, err, id)
		}
	}
	if got := NewID(0x9f3c0a1b2c3d4e5f, 42, 3).String(); got != "9f3c0a1b2c3d4e5f-42.3" {
		t.Errorf("String() = %q", got)
	}
	if !(ID{}).IsZero() || NewID(1, 0, 0).IsZero() {
		t.Error("IsZero")
	}
}

func TestParseIDRejectsMalformed(t *testing.T) {
	for _, s := range []string{"", "x", "9f3c0a1b2c3d4e5f", "9f3c0a1b2c3d4e5f-42", "9f3c-42.3", "zz3c0a1b2c3d4e5f-42.3", "9f3c0a1b2c3d4e5f-x.3", "9f3c0a1b2c3d4e5f-42.99999999999"} {
		if _, err := ParseID(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseID(%q) error = %v, want ErrSyntax", s, err)
		}
	}
}

func TestBadInputLease(t *testing.T) {
	for _, s := range []string{
		"", "x", "-", ".", "-.", "0123456789abcdef", "0123456789abcdef-", "0123456789abcdef-1", "0123456789abcdef-.1",
		"0123456789abcdef-1.", "0123456789abcde-1.1", "0123456789abcdef0-1.1", "0123456789abcdeg-1.1",
		"0123456789abcdef--1.1", "0123456789abcdef-+1.1", "0123456789abcdef-1.-1", "0123456789abcdef-1.4294967296",
		"0123456789abcdef-18446744073709551616.1", "0x23456789abcdef-1.1", "0123456789abcdef-1.1.1", "0123456789abcdef-1_0.1",
		" 0123456789abcdef-1.1", "0123456789abcdef-1.1 ", "０123456789abcdef-1.1",
	} {
		id, err := ParseID(s)
		if !errors.Is(err, ErrSyntax) || !id.IsZero() {
			t.Errorf("ParseID(%q) = %v, %v; want the zero ID and ErrSyntax", s, id, err)
		}
	}
	for _, id := range []ID{{}, NewID(math.MaxUint64, math.MaxUint64, math.MaxUint32), NewID(1, 0, 0)} {
		back, err := ParseID(id.String())
		if err != nil || back != id {
			t.Errorf("ParseID(%q) = %v, %v; want %v", id.String(), back, err, id)
		}
	}
}
