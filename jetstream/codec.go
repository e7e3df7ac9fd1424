package jetstream

import "encoding/json"

// Codec turns payloads of type T into message data and back.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// JSONCodec encodes payloads with encoding/json.
type JSONCodec[T any] struct{}

// Encode returns the JSON encoding of v.
func (JSONCodec[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode parses JSON data into a T.
func (JSONCodec[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

type bytesCodec struct{}

func (bytesCodec) Encode(v []byte) ([]byte, error)    { return v, nil }
func (bytesCodec) Decode(data []byte) ([]byte, error) { return data, nil }

type stringCodec struct{}

func (stringCodec) Encode(v string) ([]byte, error)    { return []byte(v), nil }
func (stringCodec) Decode(data []byte) (string, error) { return string(data), nil }

// DefaultCodec returns the codec used when none is given: []byte and
// string payloads pass through as the message data, anything else is JSON.
func DefaultCodec[T any]() Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(bytesCodec{}).(Codec[T])
	case string:
		return any(stringCodec{}).(Codec[T])
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
