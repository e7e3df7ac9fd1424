package lease

import (
	"errors"
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
