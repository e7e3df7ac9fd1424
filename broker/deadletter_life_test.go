package broker_test

// A dead letter's whole life: discarded for good, or redriven with a
// corrected payload. Helpers are durable_test.go's and dedup_test.go's.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/queue"
)

// poison publishes payloads to "t" and rejects each once, so that each is a
// dead letter of "s".
func poison(t *testing.T, b *broker.Broker[string], s *broker.Subscription[string], payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		_, err := b.Publish(ctx, "t", p)
		require.NoError(t, err)
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, s.Reject(ds[0].LeaseID, errors.New("bad "+p)))
	}
}

func deadPayloadsOf(b *broker.Broker[string]) []string {
	var out []string
	for _, dl := range b.DeadLetters() {
		out = append(out, dl.Message.Payload)
	}
	return out
}

func TestDiscardDeadLetters(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s")
	poison(t, b, s, "a", "b", "c", "d")
	var seen []string
	n, err := b.DiscardDeadLetters(func(dl queue.DeadLetter[string]) bool {
		seen = append(seen, dl.LastError)
		return dl.Message.Payload == "b" || dl.Message.Payload == "d"
	})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []string{"bad a", "bad b", "bad c", "bad d"}, seen, "match sees every letter, oldest first")
	assert.Equal(t, []string{"a", "c"}, deadPayloadsOf(b))
	assert.Equal(t, uint64(2), b.DeadLetterStats().Discarded)
	balanced(t, s.Stats())

	n, err = b.DiscardDeadLetters(func(queue.DeadLetter[string]) bool { return false })
	require.NoError(t, err)
	assert.Zero(t, n, "none matched")
	_, err = b.DiscardDeadLetters(nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
	n, err = b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "b" })
	require.NoError(t, err)
	assert.Zero(t, n, "a discarded letter cannot be redriven")

	require.NoError(t, b.Close())
	_, err = b.DiscardDeadLetters(func(queue.DeadLetter[string]) bool { return true })
	assert.ErrorIs(t, err, queue.ErrClosed)
}

func TestDurableDiscardDeadLetters(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	s := d.subscribe("t", "s")
	poison(t, d.Broker, s, "a", "b", "c")
	n, err := d.DiscardDeadLetters(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload != "b" })
	require.NoError(t, err)
	require.Equal(t, 2, n)
	d.restart()
	assert.Equal(t, []string{"b"}, deadPayloadsOf(d.Broker))
	require.NoError(t, d.Compact())
	d.restart()
	assert.Equal(t, []string{"b"}, deadPayloadsOf(d.Broker), "and after a compaction")
}

// A discard is one record: a journal cut anywhere inside it (a crash in
// the middle of its write) has all its letters, and one cut after it none.
func TestDurableDiscardIsAtomic(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	s := d.subscribe("t", "s")
	poison(t, d.Broker, s, "a", "b", "c")
	require.NoError(t, d.Sync())
	seg := filepath.Join(d.dir, "seg-00000001.log")
	before := fileLen(t, seg)
	_, err := d.DiscardDeadLetters(func(queue.DeadLetter[string]) bool { return true })
	require.NoError(t, err)
	require.NoError(t, d.Close())
	whole, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Greater(t, len(whole), int(before))
	for cut := int(before); cut <= len(whole); cut++ {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "seg-00000001.log"), whole[:cut], 0o644))
		b, err := broker.Open(dir, queue.StringCodec())
		require.NoError(t, err, "cut at %d", cut)
		got := deadPayloadsOf(b)
		require.NoError(t, b.Close())
		if cut == len(whole) {
			assert.Empty(t, got, "the whole record: all gone")
		} else {
			assert.Equal(t, []string{"a", "b", "c"}, got, "cut at %d of %d: none gone", cut, len(whole))
		}
	}
}

func fileLen(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

func TestRedriveWith(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "t", "s", broker.WithMaxAttempts(3))
	_, err := b.Publish(ctx, "t", "sku,x,3", broker.WithKey("k"), broker.WithPriority(queue.PriorityHigh),
		broker.WithHeaders(map[string]string{"line": "7"}))
	require.NoError(t, err)
	ds := s.TryPoll(1)
	require.NoError(t, s.Reject(ds[0].LeaseID, errors.New("malformed")))
	orig := b.DeadLetters()[0].Message

	n, err := b.RedriveWith(func(dl queue.DeadLetter[string]) (string, bool) {
		return strings.Replace(dl.Message.Payload, "x", "2", 1), true
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, b.DeadLetters())
	ds = s.TryPoll(1)
	require.Len(t, ds, 1)
	got := ds[0]
	assert.Equal(t, "sku,2,3", got.Payload, "the corrected payload")
	assert.Equal(t, 1, got.Attempt, "attempts reset")
	assert.Equal(t, orig.ID, got.ID)
	assert.Equal(t, orig.Key, got.Key)
	assert.Equal(t, orig.Priority, got.Priority)
	assert.Equal(t, "7", got.Headers.Get("line"))

	n, err = b.RedriveWith(func(queue.DeadLetter[string]) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = b.RedriveWith(nil)
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

// On a durable broker the corrected payload is what a restart brings back;
// one the codec refuses leaves its letter in the store and the journal
// healthy.
func TestDurableRedriveWith(t *testing.T) {
	d := openDur[string](t, pickyCodec{refuseEncode: "unencodable"})
	s := d.subscribe("t", "s")
	poison(t, d.Broker, s, "a", "b")
	n, err := d.RedriveWith(func(dl queue.DeadLetter[string]) (string, bool) {
		if dl.Message.Payload == "a" {
			return "a, fixed", true
		}
		return "unencodable", true
	})
	require.ErrorIs(t, err, errDurEncode)
	require.Equal(t, 1, n)
	assert.Equal(t, []string{"b"}, deadPayloadsOf(d.Broker), "the refused one stays, as it was")
	d.publish("t", "after") // the journal still takes records
	d.restart()
	assert.Equal(t, []string{"a, fixed", "after"}, peek2(t, d.sub("t", "s")))
	assert.Equal(t, []string{"b"}, deadPayloadsOf(d.Broker))
}

// peek2 returns the payloads s would deliver now and releases them.
func peek2(t *testing.T, s *broker.Subscription[string]) []string {
	t.Helper()
	ds := s.TryPoll(1 << 20)
	for _, d := range ds {
		require.NoError(t, s.Release(d.LeaseID))
	}
	return payloads(ds)
}
