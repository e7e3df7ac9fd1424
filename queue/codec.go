package queue

import (
	"encoding/json"
	"fmt"
)

// Codec turns payloads into bytes and back, for every backend that keeps
// or sends them as bytes: a durable broker (broker.Open), JetStream
// (natsleasebus), the SQS server. Encode appends v's encoding to dst and
// returns the extended slice; Decode must return an equal value for what
// Encode wrote, in this process or a later one. Both must be safe for
// concurrent use. A payload Encode refuses makes Publish fail before
// anything is stored.
type Codec[T any] interface {
	Encode(dst []byte, v T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// JSONCodec returns a codec that encodes payloads with encoding/json.
// Fields that json skips (unexported ones, channels, functions) do not
// survive a restart.
func JSONCodec[T any]() Codec[T] { return jsonCodec[T]{} }

// BytesCodec returns a codec that stores []byte payloads as they are. A
// nil payload comes back as an empty, non-nil slice.
func BytesCodec() Codec[[]byte] { return bytesCodec{} }

// StringCodec returns a codec that stores string payloads as their bytes.
func StringCodec() Codec[string] { return stringCodec{} }

// DefaultCodec returns the codec a backend uses when it is given none:
// StringCodec for string payloads and BytesCodec for []byte, which pass
// through as the bytes, and JSONCodec for any other type.
func DefaultCodec[T any]() Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(BytesCodec()).(Codec[T])
	case string:
		return any(StringCodec()).(Codec[T])
	}
	return JSONCodec[T]()
}

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("json codec: %w", err)
	}
	return append(dst, b...), nil
}

func (jsonCodec[T]) Decode(data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("json codec: %w", err)
	}
	return v, nil
}

type bytesCodec struct{}

func (bytesCodec) Encode(dst, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (bytesCodec) Decode(data []byte) ([]byte, error)   { return append([]byte{}, data...), nil }

type stringCodec struct{}

func (stringCodec) Encode(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (stringCodec) Decode(data []byte) (string, error)          { return string(data), nil }
