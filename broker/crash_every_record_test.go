package broker_test

// The deterministic crash test: a scripted workload that uses every durable
// feature writes its journal, and the test recovers from the journal cut at
// every record boundary (and at offsets inside records), as a crash would
// leave it, and checks the invariants after each. It replaces a random
// self-kill as what must hold; TestDurableCrash's SIGKILL loop is a second
// opinion.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/internal/testkit"
	"github.com/leasebus/leasebus/queue"
)

// erOp is one step of the workload and what it did.
type erOp struct {
	kind string      // publish, batch, ack, fail, reject, redrive, fix, discard, compact, tick, triage
	ps   []string    // the payloads (lineages) it concerns
	ids  []string    // dedup IDs it published with
	msgs []uuid.UUID // and the messages they named
	sub  string      // the subscription it settled on
	seg  string      // the live segment after it
	size int64       // and that segment's size
}

// erWorkload runs the script on a durable broker in dir and returns its
// operations and, for each segment it wrote, the segment's final bytes and
// the size it had when it became live.
func erWorkload(t *testing.T, dir string) ([]erOp, map[string][]byte, map[string]int64) {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := broker.Open(dir, queue.StringCodec(), erOptions(mock)...)
	require.NoError(t, err)
	work, audit, triage := erDeclare(t, b)
	ctx := context.Background()
	var ops []erOp
	final, base := map[string][]byte{}, map[string]int64{}
	done := func(op erOp) {
		t.Helper()
		require.NoError(t, b.Sync())
		segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.log"))
		require.Len(t, segs, 1)
		data, err := os.ReadFile(segs[0])
		require.NoError(t, err)
		op.seg, op.size = filepath.Base(segs[0]), int64(len(data))
		if _, ok := base[op.seg]; !ok {
			base[op.seg] = op.size
		}
		final[op.seg] = data
		ops = append(ops, op)
	}
	settle := func(s *broker.Subscription[string], name, kind string, f func(queue.Delivery[string]) error) {
		ds := s.TryPoll(1)
		if len(ds) == 0 {
			return
		}
		require.NoError(t, f(ds[0]))
		done(erOp{kind: kind, ps: []string{erLineage(ds[0].Payload)}, sub: name})
	}
	for i := range 36 {
		p, id := fmt.Sprintf("p%02d", i), fmt.Sprintf("id-%02d", i)
		opts := []broker.PublishOption{broker.WithDedupID(id), broker.WithPriority(queue.Priority(i%4 - 1))}
		switch i % 5 {
		case 1:
			opts = append(opts, broker.WithKey(fmt.Sprintf("k%d", i%3)))
		case 2:
			opts = append(opts, broker.WithDelay(time.Duration(i)*time.Second))
		case 3:
			opts = append(opts, broker.WithTTL(time.Hour))
		}
		m, err := b.Publish(ctx, "jobs", p, opts...)
		require.NoError(t, err)
		done(erOp{kind: "publish", ps: []string{p}, ids: []string{id}, msgs: []uuid.UUID{m.ID}})
		if i%6 == 5 { // a batch, one of whose IDs is an earlier publish's
			ps := []string{fmt.Sprintf("b%02da", i), fmt.Sprintf("b%02db", i), "dup"}
			ids := []string{"bid-" + ps[0], "bid-" + ps[1], fmt.Sprintf("id-%02d", i-3)}
			ms, err := b.PublishBatch(ctx, "jobs", ps, broker.WithDedupIDs(ids))
			require.NoError(t, err)
			done(erOp{kind: "batch", ps: ps[:2], ids: ids[:2], msgs: []uuid.UUID{ms[0].ID, ms[1].ID}})
		}
		if i%5 == 4 {
			mock.Add(10 * time.Second)
			done(erOp{kind: "tick"})
		}
		switch i % 4 {
		case 0:
			settle(work, "work", "ack", func(d queue.Delivery[string]) error { return work.Ack(d.LeaseID) })
		case 1, 2: // the second failure of a message dead-letters it, to "dlq"
			settle(work, "work", "fail", func(d queue.Delivery[string]) error { return work.Fail(d.LeaseID, errors.New("boom")) })
		}
		if i%3 == 2 { // to the store
			settle(audit, "audit", "reject", func(d queue.Delivery[string]) error { return audit.Reject(d.LeaseID, errors.New("no")) })
		}
		if i%4 == 3 {
			settle(triage, "triage", "triage", func(d queue.Delivery[string]) error { return triage.Ack(d.LeaseID) })
		}
		if i%7 == 6 { // one letter back, then one back corrected
			if dls := erLetters(b, "audit"); len(dls) > 0 {
				first := dls[0].Message.ID
				n, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return dl.Message.ID == first })
				require.NoError(t, err)
				require.Equal(t, 1, n)
				done(erOp{kind: "redrive", ps: []string{erLineage(dls[0].Message.Payload)}, sub: "audit"})
			}
			if dls := erLetters(b, "audit"); len(dls) > 0 {
				first := dls[0].Message.ID
				n, err := b.RedriveWith(func(dl queue.DeadLetter[string]) (string, bool) {
					return erLineage(dl.Message.Payload) + "*", dl.Message.ID == first
				})
				require.NoError(t, err)
				require.Equal(t, 1, n)
				done(erOp{kind: "fix", ps: []string{erLineage(dls[0].Message.Payload)}, sub: "audit"})
			}
		}
		if i%11 == 10 { // every audit letter but the newest, at once
			dls := erLetters(b, "audit")
			if len(dls) > 1 {
				var ps []string
				for _, dl := range dls[:len(dls)-1] {
					ps = append(ps, erLineage(dl.Message.Payload))
				}
				n, err := b.DiscardDeadLetters(func(dl queue.DeadLetter[string]) bool {
					return dl.Subscription == "audit" && slices.Contains(ps, erLineage(dl.Message.Payload))
				})
				require.NoError(t, err)
				require.Equal(t, len(ps), n)
				done(erOp{kind: "discard", ps: ps, sub: "audit"})
			}
		}
		if i == 17 || i == 31 {
			require.NoError(t, b.Compact())
			done(erOp{kind: "compact"})
		}
	}
	require.NoError(t, b.Close())
	return ops, final, base
}

func erOptions(mock clock.Clock) []broker.Option {
	return []broker.Option{broker.WithClock(mock), broker.WithSync(broker.SyncNone), broker.WithCompactMin(-1), broker.WithDedupWindow(3 * 365 * 24 * time.Hour), broker.WithSubscriptionDefaults(broker.WithVisibilityTimeout(time.Hour))}
}

func erDeclare(t *testing.T, b *broker.Broker[string]) (work, audit, triage *broker.Subscription[string]) {
	t.Helper()
	for _, topic := range []string{"jobs", "dlq"} {
		require.NoError(t, b.CreateTopic(topic))
	}
	var err error
	work, err = b.Subscribe("jobs", "work", broker.WithMaxAttempts(2), broker.WithDeadLetterTopic("dlq"),
		broker.WithRetry(queue.RetryPolicy{NoBackoff: true}))
	require.NoError(t, err)
	audit, err = b.Subscribe("jobs", "audit", broker.WithMaxAttempts(1))
	require.NoError(t, err)
	triage, err = b.Subscribe("dlq", "triage")
	require.NoError(t, err)
	return work, audit, triage
}

func erLetters(b *broker.Broker[string], sub string) []queue.DeadLetter[string] {
	var out []queue.DeadLetter[string]
	for _, dl := range b.DeadLetters() {
		if dl.Subscription == sub {
			out = append(out, dl)
		}
	}
	return out
}

// erLineage is the payload a message was published with: a corrected
// payload (RedriveWith) ends in "*".
func erLineage(p string) string { return strings.TrimRight(p, "*") }

// erFrames returns the offsets at which data's frames start, and its end.
func erFrames(data []byte) []int {
	var offs []int
	for off := 0; off+8 <= len(data); {
		offs = append(offs, off)
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if off+8+n > len(data) || crc32.Checksum(data[off+8:off+8+n], crc32.MakeTable(crc32.Castagnoli)) != binary.LittleEndian.Uint32(data[off+4:]) {
			break
		}
		off += 8 + n
	}
	return append(offs, len(data))
}

func TestDurableCrashAtEveryRecord(t *testing.T) {
	testkit.Long(t, "a crash at every record of a long script")
	ops, final, base := erWorkload(t, t.TempDir())
	kinds := map[string]int{}
	for _, op := range ops {
		kinds[op.kind]++
	}
	for _, k := range []string{"publish", "batch", "ack", "fail", "reject", "redrive", "fix", "discard", "compact", "tick", "triage"} {
		require.Positive(t, kinds[k], "the script does %s: %v", k, kinds)
	}
	cuts := 0
	for _, seg := range slices.Sorted(maps.Keys(final)) {
		data := final[seg]
		frames := erFrames(data)
		require.Equal(t, len(data), frames[len(frames)-1], "%s reads whole", seg)
		var at []int
		for i, f := range frames {
			at = append(at, f)
			if i+1 < len(frames) { // inside the next frame: its header, its body
				at = append(at, f+3, f+8+(frames[i+1]-f-8)/2, frames[i+1]-1)
			}
		}
		for _, c := range at {
			if int64(c) < base[seg] {
				continue // a segment is whole before it is live: no crash leaves less
			}
			erCheckCut(t, ops, seg, data[:c])
			cuts++
		}
	}
	t.Logf("%d operations (%v), %d segments, %d cuts recovered and checked", len(ops), kinds, len(final), cuts)
}

// erCheckCut recovers from seg cut to data and checks the invariants
// against the operations that had returned by then (and the one under
// way, whose records may be there or not, but whole or not at all).
func erCheckCut(t *testing.T, ops []erOp, seg string, data []byte) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, seg), data, 0o644))
	returned, next := 0, -1
	for i, op := range ops {
		if op.seg < seg || (op.seg == seg && op.size <= int64(len(data))) { // seg-NNNNNNNN.log sorts by number
			returned = i + 1
		} else {
			next = i
			break
		}
	}
	where := fmt.Sprintf("%s cut at %d: %d ops returned, next %v", seg, len(data), returned, erNext(ops, next))

	mock := clock.NewMock()
	mock.Set(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) // every delay due, every TTL passed
	b, err := broker.Open(dir, queue.StringCodec(), erOptions(mock)...)
	require.NoError(t, err, where)
	defer b.Close()
	work, audit, triage := erDeclare(t, b)

	// Where each lineage is: queued on a subscription, or dead (in the
	// store, or as a message of "dlq").
	places := map[string][]string{} // lineage -> places
	for name, s := range map[string]*broker.Subscription[string]{"work": work, "audit": audit, "triage": triage} {
		// Drained: a keyed message is held back behind its key's head.
		for ds := s.TryPoll(1 << 20); len(ds) > 0; ds = s.TryPoll(1 << 20) {
			for _, d := range ds {
				l := erLineage(d.Payload)
				if name == "triage" {
					places[l] = append(places[l], "work:dlq")
				} else {
					places[l] = append(places[l], name+":queued")
				}
				require.NoError(t, s.Ack(d.LeaseID))
			}
		}
	}
	for _, dl := range b.DeadLetters() {
		l := erLineage(dl.Message.Payload)
		if dl.Subscription == "triage" {
			places[l] = append(places[l], "work:dlq")
		} else {
			places[l] = append(places[l], dl.Subscription+":dead")
		}
	}
	count := func(l, sub string) int {
		n := 0
		for _, p := range places[l] {
			if strings.HasPrefix(p, sub+":") {
				n++
			}
		}
		return n
	}
	// What settled each lineage on each subscription, for good: an ack, a
	// triage ack, a discard (returned, or under way).
	settled := map[string]bool{}
	for _, op := range ops[:returned+min(1, len(ops)-returned)] {
		switch op.kind {
		case "ack", "discard":
			for _, p := range op.ps {
				settled[op.sub+":"+p] = true
			}
		case "triage":
			settled["work:"+op.ps[0]] = true
		}
	}
	published := map[string]bool{}
	for _, op := range ops[:returned] {
		if op.kind == "publish" || op.kind == "batch" {
			for _, p := range op.ps {
				published[p] = true
			}
		}
	}
	for l := range places {
		for _, sub := range []string{"work", "audit"} {
			require.LessOrEqual(t, count(l, sub), 1, "%s: %s is in more than one place of %s: %v", where, l, sub, places[l])
		}
	}
	for p := range published { // every publish that returned nil is there, or settled
		for _, sub := range []string{"work", "audit"} {
			if count(p, sub) == 0 {
				require.True(t, settled[sub+":"+p], "%s: %s, published, is lost from %s (places %v)", where, p, sub, places[p])
			}
		}
	}
	for _, op := range ops[:returned] { // nothing acked or discarded is back
		if op.kind == "ack" || op.kind == "discard" || op.kind == "triage" {
			sub := op.sub
			if op.kind == "triage" {
				sub = "work"
			}
			for _, p := range op.ps {
				require.Zero(t, count(p, sub), "%s: %s %s on %s is back: %v", where, p, op.kind, sub, places[p])
			}
		}
	}
	if next >= 0 {
		op := ops[next]
		switch op.kind {
		case "publish", "batch": // all of it, on both subscriptions, or none
			in := 0
			for _, p := range op.ps {
				in += count(p, "work") + count(p, "audit")
			}
			require.Contains(t, []int{0, 2 * len(op.ps)}, in, "%s: %v half there: %v", where, op.ps, places)
		case "discard": // all its letters, or none
			in := 0
			for _, p := range op.ps {
				in += count(p, "audit")
			}
			require.Contains(t, []int{0, len(op.ps)}, in, "%s: discard of %v half done", where, op.ps)
		}
	}
	erCheckDedup(t, b, ops, returned, next, places, where)
}

// erCheckDedup probes every dedup ID the workload used: one whose publish
// returned is remembered; one remembered names a message that is there or
// settled, never a new copy.
func erCheckDedup(t *testing.T, b *broker.Broker[string], ops []erOp, returned, next int, places map[string][]string, where string) {
	t.Helper()
	upTo := returned
	if next >= 0 {
		upTo = next + 1
	}
	for i, op := range ops[:upTo] {
		for k, id := range op.ids {
			probed := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC) // the reopened broker's clock
			m, err := b.Publish(context.Background(), "jobs", "probe", broker.WithDedupID(id))
			require.NoError(t, err, where)
			remembered := m.PublishedAt.Before(probed) // a duplicate answers with the original's time
			if i < returned {
				require.True(t, remembered, "%s: dedup ID %s of %s, which returned, is forgotten: a rerun queues it twice", where, id, op.ps[k])
			}
			if remembered {
				require.Equal(t, op.msgs[k], m.ID, "%s: dedup ID %s names its own message", where, id)
			}
			if remembered && i == next {
				require.NotEmpty(t, places[op.ps[k]], "%s: dedup ID %s remembered without its message", where, id)
			}
		}
	}
}

func erNext(ops []erOp, next int) string {
	if next < 0 {
		return "none"
	}
	return fmt.Sprintf("%s %v", ops[next].kind, ops[next].ps)
}
