package natsleasebus

import "github.com/leasebus/leasebus/queue"

// A payload of type T becomes message data through a queue.Codec[T] (the
// broker's, whose Encode appends to dst), so one codec serves a durable
// broker and JetStream alike.

// codecFor returns c as a queue.Codec[T], queue.DefaultCodec when c is nil, or false
// when c is a codec of another type.
func codecFor[T any](c any) (queue.Codec[T], bool) {
	if c == nil {
		return queue.DefaultCodec[T](), true
	}
	cc, ok := c.(queue.Codec[T])
	return cc, ok
}
