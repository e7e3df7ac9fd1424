package broker_test

// What Open refuses or repairs: bad arguments, a held lock, codec errors, a
// torn tail. Helpers are durable_test.go's.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

var (
	errDurEncode = errors.New("test codec: cannot encode")
	errDurDecode = errors.New("test codec: cannot decode")
)

// pickyCodec is queue.StringCodec that refuses to encode or decode one
// payload, or panics decoding one. A field left empty names no payload: the
// empty one is encoded and decoded as any other.
type pickyCodec struct{ refuseEncode, refuseDecode, panicDecode string }

func (c pickyCodec) Encode(dst []byte, v string) ([]byte, error) {
	if c.refuseEncode != "" && v == c.refuseEncode {
		return dst, errDurEncode
	}
	return append(dst, v...), nil
}

func (c pickyCodec) Decode(data []byte) (string, error) {
	switch v := string(data); {
	case c.refuseDecode != "" && v == c.refuseDecode:
		return "", errDurDecode
	case c.panicDecode != "" && v == c.panicDecode:
		panic("codec: " + v)
	}
	return string(data), nil
}

func TestOpenErrors(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		_, err := broker.Open(d.dir, queue.StringCodec())
		require.ErrorIs(t, err, broker.ErrLocked)
		_, err = broker.Open(d.dir, queue.JSONCodec[int]())
		require.ErrorIs(t, err, broker.ErrLocked)
		d.restart() // Close, then Open: the lock is free again
		require.NoError(t, d.CreateTopic("t"))
	})
	t.Run("options of Open only", func(t *testing.T) {
		_, err := broker.New[string](broker.WithSync(broker.SyncNone))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.New[string](broker.WithCompactMin(1))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
	})
	t.Run("invalid arguments", func(t *testing.T) {
		dir := t.TempDir()
		_, err := broker.Open[string](dir, nil)
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open("", queue.StringCodec())
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncMode(9)))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		_, err = broker.Open(dir, queue.StringCodec(), broker.WithSubscriptionDefaults(broker.WithMaxAttempts(0)))
		require.ErrorIs(t, err, queue.ErrInvalidArgument)
		b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone)) // nothing left locked
		require.NoError(t, err)
		require.NoError(t, b.Close())
	})
	t.Run("missing directory is created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "x", "y")
		b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone))
		require.NoError(t, err)
		require.NoError(t, b.CreateTopic("t"))
		require.NoError(t, b.Close())
		require.NoError(t, b.Close(), "Close twice")
		b, err = broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone))
		require.NoError(t, err)
		defer b.Close()
		require.Equal(t, []string{"t"}, b.Topics())
	})
	t.Run("broker from New", func(t *testing.T) {
		b, err := broker.New[string]()
		require.NoError(t, err)
		defer b.Close()
		require.Equal(t, broker.RecoveryInfo{}, b.Recovery())
		require.NoError(t, b.Sync())
		require.NoError(t, b.Compact())
	})
	t.Run("after Close", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		require.NoError(t, d.Close())
		require.ErrorIs(t, d.Sync(), queue.ErrClosed)
		require.ErrorIs(t, d.Compact(), queue.ErrClosed)
	})
}

// TestDurableCodecErrors: a payload the codec cannot encode is refused
// before anything is stored; one it cannot decode makes Open fail, and
// leaves the directory free for another Open.
func TestDurableCodecErrors(t *testing.T) {
	t.Run("encode", func(t *testing.T) {
		d := openDur[string](t, pickyCodec{refuseEncode: "bad"})
		s := d.subscribe("t", "s")
		_, err := d.Publish(context.Background(), "t", "bad")
		require.ErrorIs(t, err, errDurEncode)
		require.Equal(t, queue.Stats{}, s.Stats())
		d.publish("t", "good") // not sticky
		d.restart()
		s = d.sub("t", "s")
		require.Equal(t, uint64(1), s.Stats().Published)
		require.Equal(t, []string{"good/1"}, peek(t, s))
	})
	t.Run("decode", func(t *testing.T) {
		d := openDur[string](t, queue.StringCodec())
		d.subscribe("t", "s")
		d.publish("t", "ok")
		d.publish("t", "poison")
		require.NoError(t, d.Close())
		_, err := d.tryOpen(d.mock, pickyCodec{refuseDecode: "poison"})
		require.ErrorIs(t, err, errDurDecode)
		require.ErrorIs(t, err, broker.ErrCorrupt)
		d.open(d.mock)
		require.Equal(t, []string{"ok/1", "poison/1"}, peek(t, d.sub("t", "s")))
	})
	t.Run("decode, the first of thousands", func(t *testing.T) {
		// Enough messages that the restore decodes them on several
		// goroutines: the error names the first the codec refuses in the
		// queue's order, not whichever goroutine failed first.
		d := openDur[string](t, queue.StringCodec())
		d.subscribe("t", "s", broker.WithMaxQueue(1<<20))
		var first queue.Message[string]
		for i := range 3000 {
			switch i {
			case 700:
				first = d.publish("t", "poison")
			case 2500:
				d.publish("t", "poison")
			default:
				d.publish("t", fmt.Sprint("ok ", i))
			}
		}
		require.NoError(t, d.Close())
		_, err := d.tryOpen(d.mock, pickyCodec{refuseDecode: "poison"})
		require.ErrorIs(t, err, errDurDecode)
		require.ErrorContains(t, err, first.ID.String())
		d.open(d.mock)
		require.Equal(t, uint64(3000), d.sub("t", "s").Stats().Published)
	})
	t.Run("a codec that panics, among thousands", func(t *testing.T) {
		// The restore decodes these on several goroutines: the codec's
		// panic still reaches the caller of Open, not the process.
		d := openDur[string](t, queue.StringCodec())
		d.subscribe("t", "s", broker.WithMaxQueue(1<<20))
		for i := range 3000 {
			d.publish("t", fmt.Sprint("ok ", i))
		}
		require.NoError(t, d.Close())
		require.PanicsWithValue(t, "codec: ok 2500", func() { _, _ = d.tryOpen(d.mock, pickyCodec{panicDecode: "ok 2500"}) })
	})
	t.Run("empty payloads", func(t *testing.T) {
		d := openDur[[]byte](t, queue.BytesCodec())
		d.subscribe("t", "s")
		d.publish("t", nil)
		d.publish("t", []byte{})
		d.publish("t", []byte{0, 1, 2})
		d.restart()
		ds := d.sub("t", "s").TryPoll(10)
		require.Len(t, ds, 3)
		require.NotNil(t, ds[0].Payload, "nil comes back empty, not nil")
		require.Empty(t, ds[0].Payload)
		require.NotNil(t, ds[1].Payload)
		require.Empty(t, ds[1].Payload)
		require.Equal(t, []byte{0, 1, 2}, ds[2].Payload)
	})
}

// TestDurableTornTail: a journal whose end is torn (garbage after the last
// record, or its last record cut short) opens with the tail cut off and
// every whole record applied; what comes after is appended where the cut
// was, so it is there after the next restart.
func TestDurableTornTail(t *testing.T) {
	setup := func(t *testing.T) (*durBroker[string], []string) {
		d := openDur[string](t, queue.StringCodec())
		d.subscribe("t", "s")
		var want []string
		for i := range 10 {
			d.publish("t", fmt.Sprint("m", i))
			want = append(want, fmt.Sprintf("m%d/1", i))
		}
		require.NoError(t, d.Close())
		return d, want
	}
	appendBytes := func(t *testing.T, dir string, b []byte) {
		seg, _ := segFile(t, dir)
		f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.Write(b)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	// reopen opens after the damage, checks what is there, then publishes
	// one more and checks it all after another restart.
	reopen := func(t *testing.T, d *durBroker[string], cut int64, want []string) {
		t.Helper()
		d.open(d.mock)
		if cut > 0 {
			require.Equal(t, cut, d.Recovery().TruncatedBytes)
		} else {
			require.Positive(t, d.Recovery().TruncatedBytes)
		}
		require.Equal(t, want, peek(t, d.sub("t", "s")))
		d.publish("t", "after")
		d.restart()
		require.Zero(t, d.Recovery().TruncatedBytes)
		require.Equal(t, append(want, "after/1"), peek(t, d.sub("t", "s")))
	}

	t.Run("garbage", func(t *testing.T) {
		d, want := setup(t)
		appendBytes(t, d.dir, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})
		reopen(t, d, 5, want)
	})
	t.Run("garbage frame", func(t *testing.T) { // a whole frame whose checksum is wrong
		d, want := setup(t)
		appendBytes(t, d.dir, []byte{4, 0, 0, 0, 1, 2, 3, 4, 'b', 'o', 'd', 'y'})
		reopen(t, d, 12, want)
	})
	t.Run("zeros", func(t *testing.T) { // a tail the file system extended but never wrote
		d, want := setup(t)
		appendBytes(t, d.dir, make([]byte, 64))
		reopen(t, d, 64, want)
	})
	t.Run("last record cut", func(t *testing.T) {
		d, want := setup(t)
		seg, size := segFile(t, d.dir)
		require.NoError(t, os.Truncate(seg, size-3))
		reopen(t, d, 0, want[:9]) // the last record was m9's
	})
	t.Run("whole record that cannot be replayed", func(t *testing.T) {
		// Not a torn tail: a frame whose checksum holds but whose body is no
		// record. Open fails rather than cut it, and holds no lock after.
		d, want := setup(t)
		seg, size := segFile(t, d.dir)
		body := []byte{0xff, 1, 2, 3}
		frame := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
		frame = binary.LittleEndian.AppendUint32(frame, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		appendBytes(t, d.dir, append(frame, body...))
		_, err := d.tryOpen(d.mock, d.codec)
		require.ErrorIs(t, err, broker.ErrCorrupt)
		_, size2 := segFile(t, d.dir)
		require.Equal(t, size+int64(len(frame)+len(body)), size2, "a failed Open leaves the journal as it was")
		require.NoError(t, os.Truncate(seg, size))
		d.open(d.mock)
		require.Equal(t, want, peek(t, d.sub("t", "s")))
	})
}

// viewCodec decodes a payload as the very bytes it is given, as a codec of
// raw bytes written for speed might.
type viewCodec struct{}

func (viewCodec) Encode(dst, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (viewCodec) Decode(data []byte) ([]byte, error)   { return data, nil }

// TestOpenGivesACodecBytesItMayKeep: Open replays a view of the journal's
// segment and lets go of it once the broker is back, so a codec that keeps
// the bytes it decodes must get a copy: the payloads read back whole after
// Open returns, and after a compaction replaced the segment.
func TestOpenGivesACodecBytesItMayKeep(t *testing.T) {
	d := openDur[[]byte](t, viewCodec{})
	d.subscribe("t", "s", broker.WithMaxQueue(1<<20))
	const n = 5000 // more payloads than one of the blocks they are copied to holds
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("payload %d %s", i, make([]byte, i%40))
		d.publish("t", []byte(want[i]))
	}
	for range 2 {
		d.restart()
		s := d.sub("t", "s")
		require.NoError(t, d.Compact())
		var got []string
		for _, dv := range s.TryPoll(n) {
			got = append(got, string(dv.Payload))
			require.NoError(t, s.Release(dv.LeaseID))
		}
		require.Equal(t, want, got)
	}
}
