package broker

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/internal/crashcopy"
	"github.com/leasebus/leasebus/internal/journal"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// held is what a queue holds, normalized for comparison across a restart:
// a message in flight comes back as if its lease had expired.
type held struct {
	ID, Payload, Key, Headers string
	Priority                  queue.Priority
	PublishedAt               int64
	Place                     uint64
	Attempts                  int
	VisibleAt, ExpiresAt      int64
	TTL                       time.Duration
	LastError                 string
}

type deadView struct {
	Sub, ID, Payload, LastError string
	Reason                      queue.Reason
	Attempts                    int
	At                          int64
	Place                       uint64
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// view returns what b holds, per subscription, and its dead letters, as a
// restart would leave them: in-flight messages on their last attempt, or
// past their TTL, move to the end of the dead letters.
func view(b *Broker[string]) (map[string][]held, []deadView) {
	b.settleAll()
	b.mu.Lock()
	subs := b.allLocked()
	b.mu.Unlock()
	slices.SortFunc(subs, func(x, y *Subscription[string]) int { return cmp.Compare(x.jid, y.jid) })
	var dead []deadView
	for it := range b.dead.all() {
		dl := it.dl
		dead = append(dead, deadView{dl.Subscription, dl.Message.ID.String(), dl.Message.Payload, dl.LastError, dl.Reason, dl.Attempts, nanos(dl.At), dl.Place})
	}
	var fresh []deadView // dead-lettered by the restart itself
	out := map[string][]held{}
	for _, s := range subs {
		es, _, thaw := s.q.Freeze()
		thaw()
		maxAttempts := s.q.Config().MaxAttempts
		slices.SortFunc(es, func(x, y core.Entry[string]) int { return cmp.Compare(x.Place, y.Place) })
		var hs []held
		for _, e := range es {
			m := e.Message
			h := held{
				ID: m.ID.String(), Payload: m.Payload, Key: m.Key, Headers: m.Headers.String(), Priority: m.Priority,
				PublishedAt: nanos(m.PublishedAt), Place: e.Place, Attempts: e.Attempts, VisibleAt: nanos(e.VisibleAt),
				ExpiresAt: nanos(e.ExpiresAt), TTL: e.TTL, LastError: e.LastError,
			}
			if e.InFlight { // an expired lease: dead-lettered on its last attempt or past its TTL
				h.LastError, h.VisibleAt = "lease expired", 0
				dv := deadView{s.name, h.ID, m.Payload, "lease expired", queue.ReasonMaxAttempts, e.Attempts, nanos(b.clock.Now()), e.Place}
				if maxAttempts != queue.UnlimitedAttempts && e.Attempts >= maxAttempts {
					fresh = append(fresh, dv)
					continue
				}
				if !e.ExpiresAt.IsZero() && !b.clock.Now().Before(e.ExpiresAt) {
					dv.Reason = queue.ReasonExpired
					fresh = append(fresh, dv)
					continue
				}
			}
			if h.VisibleAt != 0 && h.VisibleAt <= b.clock.Now().UnixNano() {
				h.VisibleAt = 0 // visible: when it turned so does not matter
			}
			hs = append(hs, h)
		}
		out[s.topic+"/"+s.name] = hs
	}
	return out, append(dead, sortDead(fresh)...)
}

// sortDead orders dead letters by message ID: Open dead-letters the
// messages a restart finds done for in an order of its own.
func sortDead(d []deadView) []deadView {
	slices.SortFunc(d, func(x, y deadView) int { return cmp.Compare(x.Sub+x.ID, y.Sub+y.ID) })
	return d
}

// requireSame compares two lists element by element and reports the first
// difference alone (the lists are long).
func requireSame[E comparable](t *testing.T, want, got []E, msg string, args ...any) {
	t.Helper()
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("%s: item %d:\nwant %+v\ngot  %+v", fmt.Sprintf(msg, args...), i, want[i], got[i])
		}
	}
	if len(want) != len(got) {
		t.Fatalf("%s: %d items, want %d (first extra: %+v)", fmt.Sprintf(msg, args...), len(got), len(want),
			append(got[min(len(want), len(got)):], want[min(len(want), len(got)):]...)[0])
	}
}

// dedupView returns the dedup IDs b remembers now, with their messages' IDs.
func dedupView(b *Broker[string]) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for name, t := range b.topics {
		t.dedup.mu.Lock()
		for _, e := range t.dedup.liveLocked(b.clock.Now(), b.dedupWindow) {
			out[name+"/"+e.id] = e.msg.String()
		}
		t.dedup.mu.Unlock()
	}
	return out
}

// requireDedupNamed checks the messages b's dedup IDs hold: one an ID
// holds is the message it names, and, as b has just opened, every ID whose
// message a queue holds (held, from view) holds it.
func requireDedupNamed(t *testing.T, b *Broker[string], held map[string][]held) {
	t.Helper()
	queued := map[string]bool{}
	for _, hs := range held {
		for _, h := range hs {
			queued[h.ID] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, tp := range b.topics {
		tp.dedup.mu.Lock()
		tp.dedup.ids.each(func(_ uint32, s *idSlot[string]) bool {
			m := s.orig.Value()
			if m != nil {
				require.Equal(t, s.msg, m.ID, "%s/%s holds another message", name, s.id)
			}
			if queued[s.msg.String()] {
				require.NotNil(t, m, "%s/%s: its message is queued", name, s.id)
			}
			return true
		})
		tp.dedup.mu.Unlock()
	}
}

// normalizeVisible drops the visible-at times already past, in a view
// taken after a restart.
func normalizeVisible(b *Broker[string], v map[string][]held) {
	now := b.clock.Now().UnixNano()
	for _, hs := range v {
		for i := range hs {
			if hs[i].VisibleAt != 0 && hs[i].VisibleAt <= now {
				hs[i].VisibleAt = 0
			}
		}
	}
}

// TestDurableModel runs random operations on a durable broker and, at
// random points, opens a crash copy of its directory: the recovered broker
// must hold exactly what the original held (in-flight messages counted as
// expired leases), and the run goes on with the recovered one.
func TestDurableModel(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runDurableModel(t, uint64(seed), 0) })
	}
}

// TestDurableModelAtScale is the model on a journal that starts with
// thousands of messages of half a KiB, a third of them with a dedup ID:
// enough that an Open verifies the checksums ahead on another goroutine,
// decodes a queue's messages on several, and restores thousands of dedup
// IDs beside the queues, where the model's small journals do each in turn.
func TestDurableModelAtScale(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runDurableModel(t, uint64(100+seed), 3000) })
	}
}

// runDurableModel runs the model from seed, after bulk publishes.
func runDurableModel(t *testing.T, seed uint64, bulk int) {
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	mock := clock.NewMock()
	mock.Set(time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	mode := SyncMode(seed % 2)
	compactMin := []int64{-1, 1, 4096}[seed%3]
	open := func(dir string, mock *clock.Mock) *Broker[string] {
		b, err := Open(dir, queue.StringCodec(), WithClock(mock), WithSync(mode), WithCompactMin(compactMin), WithDeadLetterLimit(40))
		require.NoError(t, err)
		return b
	}
	subOpts := map[string][]SubscribeOption{
		"a": {WithMaxAttempts(3), WithVisibilityTimeout(10 * time.Second), WithRetry(queue.RetryPolicy{Initial: time.Second, Max: 4 * time.Second})},
		"b": {WithMaxAttempts(queue.UnlimitedAttempts), WithDefaultTTL(time.Minute), WithMaxQueue(25), WithOverflow(queue.OverflowDropOldest)},
	}
	declare := func(b *Broker[string]) map[string]*Subscription[string] {
		require.NoError(t, b.CreateTopic("t"))
		subs := map[string]*Subscription[string]{}
		for _, name := range []string{"a", "b"} {
			s, err := b.Subscribe("t", name, subOpts[name]...)
			require.NoError(t, err)
			subs[name] = s
		}
		return subs
	}
	b := open(dir, mock)
	defer func() { b.Close() }()
	subs := declare(b)
	pad := strings.Repeat("x", 500)
	for i := range bulk {
		var opts []PublishOption
		if i%3 == 0 {
			opts = append(opts, WithDedupID(fmt.Sprint("bulk", i)))
		}
		_, err := b.Publish(ctx, "t", fmt.Sprint("bulk ", i, pad), opts...)
		require.NoError(t, err)
	}
	type out struct {
		sub string
		id  lease.ID
	}
	var leases []out
	next := 0
	restarts := 0
	for step := range 400 {
		switch op := r.IntN(100); {
		case op < 30:
			var opts []PublishOption
			if r.IntN(3) == 0 {
				opts = append(opts, WithPriority(queue.Priority(r.IntN(4)-1)))
			}
			if r.IntN(4) == 0 {
				opts = append(opts, WithKey(fmt.Sprint("k", r.IntN(3))))
			}
			if r.IntN(5) == 0 {
				opts = append(opts, WithDelay(time.Duration(r.IntN(20))*time.Second))
			}
			if r.IntN(6) == 0 {
				opts = append(opts, WithTTL(time.Duration(1+r.IntN(30))*time.Second))
			}
			if r.IntN(6) == 0 {
				opts = append(opts, WithHeaders(map[string]string{"h": fmt.Sprint(step)}))
			}
			if r.IntN(4) == 0 { // a small set of IDs: some publishes are duplicates
				opts = append(opts, WithDedupID(fmt.Sprint("d", r.IntN(8))))
			}
			next++
			_, err := b.Publish(ctx, "t", fmt.Sprint("m", next), opts...)
			require.NoError(t, err)
		case op < 50:
			name := []string{"a", "b"}[r.IntN(2)]
			for _, d := range subs[name].TryPoll(1 + r.IntN(4)) {
				leases = append(leases, out{name, d.LeaseID})
			}
		case op < 80 && len(leases) > 0:
			i := r.IntN(len(leases))
			l := leases[i]
			leases = slices.Delete(leases, i, i+1)
			s := subs[l.sub]
			switch r.IntN(6) {
			case 0, 1:
				_ = s.Ack(l.id) // may have expired: either way the model is the broker itself
			case 2:
				_ = s.Nack(l.id, time.Duration(r.IntN(5))*time.Second)
			case 3:
				_ = s.Fail(l.id, fmt.Errorf("boom %d", step))
			case 4:
				_ = s.Release(l.id)
			case 5:
				_ = s.Reject(l.id, nil)
			}
		case op < 88:
			mock.Add(time.Duration(r.IntN(15)) * time.Second)
		case op < 91:
			_, err := b.Redrive(func(dl queue.DeadLetter[string]) bool { return r.IntN(2) == 0 })
			if err != nil {
				require.ErrorIs(t, err, queue.ErrQueueFull)
			}
		case op < 92 && r.IntN(2) == 0:
			_, err := subs["b"].Purge()
			require.NoError(t, err)
		case op < 92: // b goes and comes back: its dead letters stay, and redrive to the new b
			require.NoError(t, b.Unsubscribe("t", "b"))
			s, err := b.Subscribe("t", "b", subOpts["b"]...)
			require.NoError(t, err)
			subs["b"] = s
			leases = slices.DeleteFunc(leases, func(l out) bool { return l.sub == "b" })
		case op < 94:
			require.NoError(t, b.Compact())
		case op < 100:
			before := len(b.DeadLetters())
			wantDedup := dedupView(b)
			wantHeld, wantDead := view(b)
			nfresh := len(wantDead) - before
			if n := len(wantDead); n > 40 { // the store's bound, applied as Open refills it
				wantDead = wantDead[n-40:]
			}
			mock2 := clock.NewMock()
			mock2.Set(mock.Now())
			cdir := crashcopy.Of(t, dir)
			b2 := open(cdir, mock2)
			subs2 := declare(b2)
			gotHeld, gotDead := view(b2)
			normalizeVisible(b2, wantHeld)
			if k := len(gotDead) - nfresh; k >= 0 {
				sortDead(gotDead[k:])
			}
			for k := range wantHeld {
				requireSame(t, wantHeld[k], gotHeld[k], "step %d: %s", step, k)
			}
			require.Len(t, gotHeld, len(wantHeld))
			requireSame(t, wantDead, gotDead, "step %d: dead letters", step)
			require.Equal(t, wantDedup, dedupView(b2), "step %d: dedup IDs", step)
			requireDedupNamed(t, b2, gotHeld)
			// Go on with the recovered broker, in its own directory.
			b.Close()
			b, subs, mock, leases = b2, subs2, mock2, nil
			dir = cdir
			restarts++
		}
	}
	require.Positive(t, restarts)
	require.NoError(t, b.Close())
}

// A message too large for one journal record is refused as an invalid
// argument, before anything is stored, and the broker goes on.
func TestDurableOversizedMessage(t *testing.T) {
	b, err := Open(t.TempDir(), queue.BytesCodec(), WithSync(SyncNone))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.CreateTopic("t"))
	s, err := b.Subscribe("t", "s")
	require.NoError(t, err)
	_, err = b.Publish(context.Background(), "t", make([]byte, maxEnvelope))
	require.ErrorIs(t, err, queue.ErrInvalidArgument)
	require.Zero(t, s.Stats().Published)
	_, err = b.Publish(context.Background(), "t", []byte("small"))
	require.NoError(t, err)
	require.Len(t, s.TryPoll(10), 1)
}

// A journal of another format (a later version's, or no leasebus journal
// at all) fails to open, says why, and is left as it was.
func TestDurableJournalFormat(t *testing.T) {
	for name, c := range map[string]struct {
		first []byte
		want  string
	}{
		"later version": {append(append([]byte{recFormat, byte(len(formatMagic))}, formatMagic...), formatVersion+1),
			fmt.Sprintf(`version %d, this is "leasebus" version %d`, formatVersion+1, formatVersion)},
		"other magic": {append(append([]byte{recFormat, 3}, "xyz"...), 1), `format "xyz"`},
		"no format":   {append([]byte{recTopic, 1}, 't'), "not a leasebus journal"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			seg := journal.AppendFrame(nil, c.first)
			path := filepath.Join(dir, "seg-00000001.log")
			require.NoError(t, os.WriteFile(path, seg, 0o644))
			_, err := Open(dir, queue.StringCodec())
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, c.want)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, seg, data, "the journal is left as it was")
		})
	}
}

// A journal written in format version 1 (before recDedupRef) still opens.
func TestDurableJournalFormatVersion1Opens(t *testing.T) {
	dir := t.TempDir()
	var e enc
	seg := journal.AppendFrame(nil, append(append([]byte{recFormat, byte(len(formatMagic))}, formatMagic...), 1))
	seg = journal.AppendFrame(seg, e.start(recTopic).strs("t").b)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seg-00000001.log"), seg, 0o644))
	b, err := Open(dir, queue.StringCodec())
	require.NoError(t, err)
	require.Equal(t, []string{"t"}, b.Topics())
	require.NoError(t, b.Close())
}
