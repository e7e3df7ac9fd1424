package queue_test

import (
	"testing"

	"github.com/leasebus/leasebus/queue"
)

// DefaultCodec passes string and []byte payloads through as their bytes
// and encodes any other type as JSON.
func TestDefaultCodec(t *testing.T) {
	if b, err := queue.DefaultCodec[string]().Encode(nil, `say "hi"`); err != nil || string(b) != `say "hi"` {
		t.Fatalf("string: %q, %v", b, err)
	}
	if b, err := queue.DefaultCodec[[]byte]().Encode(nil, []byte{0xff, 0}); err != nil || string(b) != "\xff\x00" {
		t.Fatalf("[]byte: %q, %v", b, err)
	}
	type order struct{ ID int }
	c := queue.DefaultCodec[order]()
	b, err := c.Encode(nil, order{ID: 7})
	if err != nil || string(b) != `{"ID":7}` {
		t.Fatalf("struct: %q, %v", b, err)
	}
	if o, err := c.Decode(b); err != nil || o.ID != 7 {
		t.Fatalf("decode: %+v, %v", o, err)
	}
}
