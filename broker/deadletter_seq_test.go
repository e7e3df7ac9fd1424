package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
)

// overflowed returns a broker holding n dead letters "dl0", "dl1", ...
// (each an overflow of subscription t/s, which holds "kept").
func overflowed(t *testing.T, n int) (*broker.Broker[string], *broker.Subscription[string]) {
	t.Helper()
	b, err := broker.New[string](broker.WithDeadLetterLimit(1 << 20))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s", broker.WithMaxQueue(1))
	require.NoError(t, err)
	_, err = b.Publish(context.Background(), "t", "kept")
	require.NoError(t, err)
	for i := range n {
		_, err := b.Publish(context.Background(), "t", fmt.Sprintf("dl%d", i))
		require.NoError(t, err)
	}
	return b, s
}

func letterPayloads(dls []queue.DeadLetter[string]) []string {
	var out []string
	for _, dl := range dls {
		out = append(out, dl.Message.Payload)
	}
	return out
}

// DeadLettersSeq yields what DeadLetters returns, in its order, across
// chunk boundaries, and stops when yield does.
func TestDeadLettersSeqYieldsTheStore(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b, _ := overflowed(t, n)
			var got []queue.DeadLetter[string]
			for dl := range b.DeadLettersSeq() {
				got = append(got, dl)
			}
			require.Equal(t, letterPayloads(b.DeadLetters()), letterPayloads(got))
			require.Len(t, got, n)
		})
	}
	b, _ := overflowed(t, 600)
	seen := 0
	for range b.DeadLettersSeq() {
		seen++
		if seen == 300 {
			break
		}
	}
	require.Equal(t, 300, seen, "a break stops it")
}

// yield may call the broker: a letter redriven or discarded before it is
// yielded is not yielded, one added is, and none is yielded twice.
func TestDeadLettersSeqUnderChange(t *testing.T) {
	b, s := overflowed(t, 600)
	kept := s.TryPoll(1)
	require.Len(t, kept, 1)
	var got []string
	for dl := range b.DeadLettersSeq() {
		got = append(got, dl.Message.Payload)
		switch dl.Message.Payload {
		case "dl10": // discard one in a later chunk and one already yielded
			n, err := b.DiscardDeadLetters(func(dl queue.DeadLetter[string]) bool {
				return dl.Message.Payload == "dl300" || dl.Message.Payload == "dl5"
			})
			require.NoError(t, err)
			require.Equal(t, 2, n)
		case "dl20": // make room, and redrive the one being yielded and one not yet
			require.NoError(t, s.Ack(kept[0].LeaseID))
			n, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "dl20" })
			require.NoError(t, err)
			require.Equal(t, 1, n)
		case "dl40": // the subscription is full again: one more overflows, a new letter at the end
			_, err := b.Publish(context.Background(), "t", "late")
			require.NoError(t, err)
		}
	}
	require.NotContains(t, got, "dl300")
	require.Contains(t, got, "dl5", "yielded before it was discarded")
	require.Equal(t, "late", got[len(got)-1])
	require.Len(t, got, 600-1+1)
	seen := map[string]bool{}
	for _, p := range got {
		require.False(t, seen[p], "%s yielded twice", p)
		seen[p] = true
	}
	require.Equal(t, []string{"dl20"}, payloads(s.TryPoll(10)))
}

// A bulk action that matches few letters of a large store reads the store
// a chunk at a time: it allocates what it matches, not a copy of the store
// (the copy of 100,000 letters was over 20 MiB).
func TestBulkActionsDoNotCopyTheStore(t *testing.T) {
	testkit.Long(t, "a store of 100,000 dead letters")
	b, _ := overflowed(t, 100_000)
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	one := func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "dl99999" }
	for name, f := range map[string]func(){
		"DiscardDeadLetters": func() {
			n, err := b.DiscardDeadLetters(func(queue.DeadLetter[string]) bool { return false })
			require.NoError(t, err)
			require.Zero(t, n)
		},
		"Redrive": func() {
			n, err := b.Redrive(one) // the subscription is full: it stays
			require.Error(t, err)
			require.Zero(t, n)
		},
		"DeadLettersSeq": func() {
			for range b.DeadLettersSeq() {
			}
		},
	} {
		require.Less(t, allocated(f), uint64(2<<20), name)
	}
}

// DeadLetterStats says what the store holds and what left it: dropped
// because it was full, or discarded.
func TestDeadLetterStats(t *testing.T) {
	b, err := broker.New[string](broker.WithDeadLetterLimit(3))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	_, err = b.Subscribe("t", "s", broker.WithMaxQueue(1))
	require.NoError(t, err)
	for i := range 6 { // the first is held; five overflow into a store of three
		_, err := b.Publish(ctx, "t", fmt.Sprint(i))
		require.NoError(t, err)
	}
	require.Equal(t, queue.DeadLetterStats{Held: 3, Dropped: 2}, b.DeadLetterStats())
	n, err := b.DiscardDeadLetters(func(dl queue.DeadLetter[string]) bool { return dl.Message.Payload == "5" })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, queue.DeadLetterStats{Held: 2, Dropped: 2, Discarded: 1}, b.DeadLetterStats())
}
