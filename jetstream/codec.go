package jetstream

import "github.com/leasebus/leasebus/broker"

// Codec turns payloads of type T into message data and back. It is the
// broker's codec (Encode appends to dst), so one codec serves a durable
// broker and JetStream alike.
type Codec[T any] = broker.Codec[T]

// JSONCodec encodes payloads with encoding/json (broker.JSONCodec).
type JSONCodec[T any] = broker.JSONCodec[T]

// DefaultCodec returns the codec used when none is given: []byte and
// string payloads pass through as the message data (broker.BytesCodec,
// broker.StringCodec), anything else is JSON.
func DefaultCodec[T any]() Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(broker.BytesCodec{}).(Codec[T])
	case string:
		return any(broker.StringCodec{}).(Codec[T])
	}
	return JSONCodec[T]{}
}

// codecFor returns c as a Codec[T], DefaultCodec when c is nil, or false
// when c is a codec of another type.
func codecFor[T any](c any) (Codec[T], bool) {
	if c == nil {
		return DefaultCodec[T](), true
	}
	cc, ok := c.(Codec[T])
	return cc, ok
}
