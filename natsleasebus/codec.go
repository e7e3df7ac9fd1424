package natsleasebus

import "github.com/leasebus/leasebus/queue"

// A payload of type T becomes message data through a queue.Codec[T] (the
// broker's, whose Encode appends to dst), so one codec serves a durable
// broker and JetStream alike.

// defaultCodec returns the codec used when none is given: []byte and
// string payloads pass through as the message data (queue.BytesCodec,
// queue.StringCodec), anything else is JSON.
func defaultCodec[T any]() queue.Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(queue.BytesCodec()).(queue.Codec[T])
	case string:
		return any(queue.StringCodec()).(queue.Codec[T])
	}
	return queue.JSONCodec[T]()
}

// codecFor returns c as a queue.Codec[T], defaultCodec when c is nil, or false
// when c is a codec of another type.
func codecFor[T any](c any) (queue.Codec[T], bool) {
	if c == nil {
		return defaultCodec[T](), true
	}
	cc, ok := c.(queue.Codec[T])
	return cc, ok
}
