package broker_test

// Operations that change more than one thing are one record: cut at every
// byte of what they wrote, as a crash or a full disk would, a journal has
// all of the operation or none of it.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// cutEvery runs setup and then op on a durable broker in a new directory,
// and calls check with a broker reopened from the journal cut within what
// op wrote: at every record boundary, and inside every record at its
// header, its middle and its last byte (a cut anywhere inside a record
// reads as the boundary before it, its rest a torn tail).
func cutEvery(t *testing.T, setup, op func(b *broker.Broker[string]), check func(b *broker.Broker[string], whole bool)) {
	t.Helper()
	dir := t.TempDir()
	seg := filepath.Join(dir, "seg-00000001.log")
	b, err := broker.Open(dir, queue.StringCodec(), broker.WithSync(broker.SyncNone))
	require.NoError(t, err)
	setup(b)
	require.NoError(t, b.Sync())
	before := fileLen(t, seg)
	op(b)
	require.NoError(t, b.Close())
	data, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Greater(t, int64(len(data)), before)
	frames := erFrames(data)
	var cuts []int64
	for i, f := range frames {
		if int64(f) < before {
			continue
		}
		cuts = append(cuts, int64(f))
		if i+1 < len(frames) {
			cuts = append(cuts, int64(f+3), int64(f+8+(frames[i+1]-f-8)/2), int64(frames[i+1]-1))
		}
	}
	require.Equal(t, before, cuts[0], "op's records start at a record boundary")
	for _, cut := range cuts {
		cdir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(cdir, "seg-00000001.log"), data[:cut], 0o644))
		rb, err := broker.Open(cdir, queue.StringCodec(), broker.WithSync(broker.SyncNone))
		require.NoError(t, err, "cut at %d", cut)
		check(rb, cut == int64(len(data)))
		require.NoError(t, rb.Close())
	}
}

// Item 4 of the issue: a write cut short (a crash, a full disk) kept a
// message's put and lost its dedup record, and the rerun queued it twice.
func TestDurablePublishWithDedupIsAtomic(t *testing.T) {
	cutEvery(t, func(b *broker.Broker[string]) {
		require.NoError(t, b.CreateTopic("t"))
		_, err := b.Subscribe("t", "s")
		require.NoError(t, err)
	}, func(b *broker.Broker[string]) {
		_, err := b.Publish(context.Background(), "t", "item", broker.WithDedupID("line-7"))
		require.NoError(t, err)
	}, func(b *broker.Broker[string], whole bool) {
		s, err := b.Subscribe("t", "s")
		require.NoError(t, err)
		_, err = b.Publish(context.Background(), "t", "item", broker.WithDedupID("line-7")) // the rerun
		require.NoError(t, err)
		require.Equal(t, []string{"item"}, payloads(s.TryPoll(10)), "queued once, whatever the cut")
	})
}

// Item 3 of the issue: routing a dead letter to its dead-letter topic wrote
// the copy there and, in another record, that it left the store; a crash
// between kept it in both places.
func TestDurableDeadLetterRoutingIsAtomic(t *testing.T) {
	declare := func(b *broker.Broker[string]) (*broker.Subscription[string], *broker.Subscription[string]) {
		for _, topic := range []string{"jobs", "dlq"} {
			require.NoError(t, b.CreateTopic(topic))
		}
		s, err := b.Subscribe("jobs", "work", broker.WithMaxAttempts(1), broker.WithDeadLetterTopic("dlq"))
		require.NoError(t, err)
		dlq, err := b.Subscribe("dlq", "triage")
		require.NoError(t, err)
		return s, dlq
	}
	cutEvery(t, func(b *broker.Broker[string]) {
		declare(b)
		_, err := b.Publish(context.Background(), "jobs", "poison")
		require.NoError(t, err)
	}, func(b *broker.Broker[string]) {
		s, err := b.Subscription("jobs", "work")
		require.NoError(t, err)
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, s.Fail(ds[0].LeaseID, errors.New("bad")))
	}, func(b *broker.Broker[string], whole bool) {
		s, dlq := declare(b)
		places := 0
		for _, d := range s.TryPoll(10) { // the lease was cut off: back, or dead on its last attempt
			require.Equal(t, "poison", d.Payload)
			places++
		}
		places += len(dlq.TryPoll(10)) + len(b.DeadLetters())
		require.Equal(t, 1, places, "one place, never two")
		if whole {
			require.Empty(t, b.DeadLetters())
		}
	})
}

// A dead letter redriven onto a subscription of its name that was created
// again (the one that made it is gone) is put there and leaves the store in
// one record: never in both places, never in neither.
func TestDurableRedriveElsewhereIsAtomic(t *testing.T) {
	cutEvery(t, func(b *broker.Broker[string]) {
		require.NoError(t, b.CreateTopic("t"))
		s, err := b.Subscribe("t", "s", broker.WithMaxAttempts(1))
		require.NoError(t, err)
		_, err = b.Publish(context.Background(), "t", "poison")
		require.NoError(t, err)
		ds := s.TryPoll(1)
		require.Len(t, ds, 1)
		require.NoError(t, s.Reject(ds[0].LeaseID, errors.New("bad")))
		require.NoError(t, b.Unsubscribe("t", "s")) // its dead letter stays
		_, err = b.Subscribe("t", "s", broker.WithMaxAttempts(1))
		require.NoError(t, err)
	}, func(b *broker.Broker[string]) {
		n, err := b.Redrive(func(queue.DeadLetter[string]) bool { return true })
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}, func(b *broker.Broker[string], whole bool) {
		s, err := b.Subscribe("t", "s", broker.WithMaxAttempts(1))
		require.NoError(t, err)
		queued, dead := len(s.TryPoll(10)), len(b.DeadLetters())
		require.Equal(t, 1, queued+dead, "one place: queued %d, dead %d", queued, dead)
		if whole {
			require.Equal(t, 1, queued)
		}
	})
}
