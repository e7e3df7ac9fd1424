package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/queue"
)

// FuzzOpen writes arbitrary records, each with a valid frame and checksum,
// as a journal and opens it: Open must return a broker or an error, never
// panic, and a broker it returns must work and close. The input is a list
// of records, each a length byte then that many bytes; the seeds are the
// records of a real journal.
func FuzzOpen(f *testing.F) {
	f.Add(seedJournal(f))
	f.Add([]byte{1, recTopic, 3, recPut, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var seg []byte
		for len(data) > 0 {
			n := min(int(data[0]), len(data)-1)
			if n > 0 {
				seg = journal.AppendFrame(seg, data[1:1+n])
			}
			data = data[1+n:]
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "seg-00000001.log"), seg, 0o644); err != nil {
			t.Fatal(err)
		}
		mock := clock.NewMock()
		mock.Set(time.Unix(1_700_000_000, 0))
		b, err := Open(dir, queue.StringCodec(), WithClock(mock), WithSync(SyncNone))
		if err != nil {
			return
		}
		ctx := context.Background()
		for _, topic := range b.Topics() {
			full := false // a recovered OverflowBlock subscription may be full: do not publish to wait
			if subs, err := b.Subscriptions(topic); err == nil {
				for _, name := range subs {
					s, err := b.Subscribe(topic, name)
					var mismatch *ConfigMismatchError
					if errors.As(err, &mismatch) && slices.Equal(mismatch.Diffs, filterNeeded) {
						// Stored with a filter: it must be declared with one again
						// (filters are functions, not stored); nothing else may differ.
						s, err = b.Subscribe(topic, name, WithFilter(func(queue.Message[string]) bool { return true }))
					}
					if err != nil {
						t.Fatalf("recovered subscription %q on %q: %v", name, topic, err)
					}
					for _, d := range s.TryPoll(100) {
						_ = s.Ack(d.LeaseID)
					}
				}
			}
			for _, s := range b.AllSubscriptions() { // a pattern's too
				st, cfg := s.Stats(), s.Config()
				full = full || cfg.Overflow == queue.OverflowBlock && st.Visible+st.Delayed+st.InFlight+st.HeldBack >= cfg.MaxQueue
			}
			if !full {
				_, _ = b.Publish(ctx, topic, "x")
			}
		}
		mock.Add(time.Hour)
		_, _ = b.Redrive(func(queue.DeadLetter[string]) bool { return true })
		_ = b.Compact()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// filterNeeded is the one difference a Subscribe without options may meet
// on a recovered subscription: it was stored with a filter.
var filterNeeded = []Diff{{Setting: "Filter", Option: "WithFilter", Stored: "a filter", Requested: "none"}}

// seedJournal returns the records of a small journal with every kind of
// record, in FuzzOpen's input format.
func seedJournal(f *testing.F) []byte {
	dir := f.TempDir()
	mock := clock.NewMock()
	b, err := Open(dir, queue.StringCodec(), WithClock(mock), WithSync(SyncNone), WithCompactMin(-1))
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	b.CreateTopic("t")
	b.CreateTopic("gone")
	s, _ := b.Subscribe("t", "s", WithMaxAttempts(2), WithDefaultTTL(time.Hour))
	b.Subscribe("t.*", "w")
	b.Subscribe("t", "f", WithFilter(func(m queue.Message[string]) bool { return m.Payload != "b" }))
	for _, p := range []string{"a", "b", "c", "d"} {
		b.Publish(ctx, "t", p, WithHeaders(map[string]string{"h": p}), WithDedupID(p))
	}
	b.Publish(ctx, "t", "keyed", WithKey("k"))
	b.Publish(ctx, "t", "later", WithDelay(time.Minute), WithPriority(queue.PriorityHigh))
	ds := s.TryPoll(3)
	if len(ds) != 3 {
		f.Fatalf("seed: polled %d, want 3", len(ds))
	}
	s.Ack(ds[0].LeaseID)
	s.Nack(ds[1].LeaseID, time.Second)
	s.Release(ds[2].LeaseID)
	for _, d := range s.TryPoll(3) {
		s.Reject(d.LeaseID, nil)
	}
	b.Redrive(func(queue.DeadLetter[string]) bool { return true })
	s.Purge()
	b.Unsubscribe("t.*", "w")
	b.DeleteTopic("gone")
	if err := b.Close(); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "seg-00000001.log"))
	if err != nil {
		f.Fatal(err)
	}
	var out []byte
	first := true
	if _, err := journal.Scan(data, func(body []byte) error {
		if first { // the segment's header: FuzzOpen writes a segment of the format before headers
			first = false
			return nil
		}
		if len(body) > 255 {
			body = body[:255]
		}
		out = append(append(out, byte(len(body))), body...)
		return nil
	}); err != nil {
		f.Fatal(err)
	}
	return out
}
