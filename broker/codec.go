package broker

import (
	"encoding/json"
	"fmt"
)

// Codec turns payloads into bytes and back for a durable broker (Open).
// Encode appends v's encoding to dst and returns the extended slice; Decode
// must return an equal value for what Encode wrote, in this process or a
// later one. Both must be safe for concurrent use. A payload Encode refuses
// makes Publish fail before anything is stored.
type Codec[T any] interface {
	Encode(dst []byte, v T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// JSONCodec encodes payloads with encoding/json. Fields that json skips
// (unexported ones, channels, functions) do not survive a restart.
type JSONCodec[T any] struct{}

// Encode appends v as JSON.
func (JSONCodec[T]) Encode(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("json codec: %w", err)
	}
	return append(dst, b...), nil
}

// Decode reads a JSON payload.
func (JSONCodec[T]) Decode(data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("json codec: %w", err)
	}
	return v, nil
}

// BytesCodec stores []byte payloads as they are. A nil payload comes back
// as an empty, non-nil slice.
type BytesCodec struct{}

// Encode appends v.
func (BytesCodec) Encode(dst, v []byte) ([]byte, error) { return append(dst, v...), nil }

// Decode returns a copy of data.
func (BytesCodec) Decode(data []byte) ([]byte, error) { return append([]byte{}, data...), nil }

// StringCodec stores string payloads as their bytes.
type StringCodec struct{}

// Encode appends v.
func (StringCodec) Encode(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }

// Decode returns data as a string.
func (StringCodec) Decode(data []byte) (string, error) { return string(data), nil }
