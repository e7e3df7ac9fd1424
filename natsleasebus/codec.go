package natsleasebus

import "github.com/leasebus/leasebus/broker"

// A payload of type T becomes message data through a broker.Codec[T] (the
// broker's, whose Encode appends to dst), so one codec serves a durable
// broker and JetStream alike.

// defaultCodec returns the codec used when none is given: []byte and
// string payloads pass through as the message data (broker.BytesCodec,
// broker.StringCodec), anything else is JSON.
func defaultCodec[T any]() broker.Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(broker.BytesCodec()).(broker.Codec[T])
	case string:
		return any(broker.StringCodec()).(broker.Codec[T])
	}
	return broker.JSONCodec[T]()
}

// codecFor returns c as a broker.Codec[T], defaultCodec when c is nil, or false
// when c is a codec of another type.
func codecFor[T any](c any) (broker.Codec[T], bool) {
	if c == nil {
		return defaultCodec[T](), true
	}
	cc, ok := c.(broker.Codec[T])
	return cc, ok
}
