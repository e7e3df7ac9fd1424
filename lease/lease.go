// Package lease names leases: an ID is the receipt a consumer gets with
// each delivery and gives back to Ack, Nack, Extend and the rest. It is
// printable and parseable, so a receipt can travel as text (an SQS receipt
// handle, a log line), and a backend mints its own with NewID.
//
// The package is pure data: no locks, no clock, no goroutines.
package lease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ID names one delivery of one message on one subscription: a receipt.
//
// An ID is a small comparable value (use it as a map key or compare it with
// ==), costs no allocation, and prints with String. The zero ID is never
// issued. Another backend can mint its own receipts with NewID, for example
// from a stream sequence and a delivery count.
type ID struct {
	scope    uint64 // who issued it (one subscription); never 0 for an issued ID
	seq      uint64 // which message within the scope
	delivery uint32 // which delivery of that message, from 1
}

// NewID returns the ID for the given delivery of message seq within scope.
// Scope names the issuer (one subscription) and must not be 0 for an ID
// that will be handed to a consumer; seq names a message within the scope;
// delivery counts deliveries of that message from 1.
func NewID(scope, seq uint64, delivery uint32) ID {
	return ID{scope: scope, seq: seq, delivery: delivery}
}

// Scope returns the issuer of the lease.
func (id ID) Scope() uint64 { return id.scope }

// Seq returns the message sequence within the issuer.
func (id ID) Seq() uint64 { return id.seq }

// Delivery returns which delivery of the message this lease is, from 1.
func (id ID) Delivery() uint32 { return id.delivery }

// IsZero reports whether id is the zero ID, which is never issued.
func (id ID) IsZero() bool { return id == ID{} }

// String formats id as "scope-seq.delivery", with scope in 16 hex digits:
// for example "9f3c0a1b2c3d4e5f-42.3". ParseID reverses it.
func (id ID) String() string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 16+1+20+1+10)
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[id.scope>>shift&0xf])
	}
	b = append(b, '-')
	b = strconv.AppendUint(b, id.seq, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(id.delivery), 10)
	return string(b)
}

// ErrSyntax is returned (wrapped) by ParseID for a malformed lease id.
var ErrSyntax = errors.New("lease: malformed id")

// ParseID parses the form that ID.String produces.
func ParseID(s string) (ID, error) {
	scope, rest, ok := strings.Cut(s, "-")
	if !ok || len(scope) != 16 {
		return ID{}, fmt.Errorf("parse %q: %w", s, ErrSyntax)
	}
	seq, del, ok := strings.Cut(rest, ".")
	if !ok {
		return ID{}, fmt.Errorf("parse %q: %w", s, ErrSyntax)
	}
	sc, err1 := strconv.ParseUint(scope, 16, 64)
	sq, err2 := strconv.ParseUint(seq, 10, 64)
	dl, err3 := strconv.ParseUint(del, 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ID{}, fmt.Errorf("parse %q: %w", s, ErrSyntax)
	}
	return ID{scope: sc, seq: sq, delivery: uint32(dl)}, nil
}
