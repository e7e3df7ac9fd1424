package schedule

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// Run fires the schedules until ctx ends, then returns nil (after the job
// running at that moment returns: it sees ctx end too). At each wake-up it
// reads the clock, fires every slot then due, oldest first and one job at
// a time, and waits for the next: one timer on the clock for the earliest
// slot, never a polling tick. While another Run is active it returns
// ErrRunning; Run may be called again after it returns. A nil ctx is an
// invalid argument.
func (s *Scheduler) Run(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("Run: nil context")
	}
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return ErrRunning
	}
	s.running = true
	now := s.clk.Now()
	for _, e := range s.entries {
		e.since = laterOf(e.since, now)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.pk.Unpark()
		s.mu.Unlock()
	}()
	for ctx.Err() == nil {
		s.mu.Lock()
		now := s.clk.Now()
		e, wake := s.dueLocked(now)
		if e == nil {
			s.pk.Park(wake)
			s.mu.Unlock()
			var t backend.Timer
			if !wake.IsZero() {
				t = backend.At(s.clk, wake)
			}
			select {
			case <-t.C:
			case <-s.kick:
			case <-ctx.Done():
			}
			t.Stop()
			s.pk.Unpark()
			continue
		}
		fires, save := s.planLocked(e, now)
		s.mu.Unlock()
		s.saved(e, save)
		s.execute(ctx, e, fires)
	}
	return nil
}

// dueLocked returns the schedule whose fire is due at now, the earliest
// (then by name) if several are, or else nil and when the earliest fire
// falls (zero if none will).
func (s *Scheduler) dueLocked(now time.Time) (due *entry, wake time.Time) {
	for _, e := range s.entries {
		if e.st.Paused || e.next.IsZero() {
			continue
		}
		at := e.fireAt()
		if wake.IsZero() || at.Before(wake) || at.Equal(wake) && e.name < due.name {
			due, wake = e, at
		}
	}
	if due == nil || wake.After(now) {
		return nil, wake
	}
	return due, wake
}

// planLocked decides what e does at now, when its pending slot is due,
// and returns the slots to fire, oldest first, and the Store save of the
// slots it skips (nil if none).
//
// The slots up to e.since passed while no Run was running for e, and
// those up to a failed fire's retry, if any passed after the slot that
// failed, passed while the job failed: they follow its missed-slot policy,
// judged at that time. The slots after it passed while Run was: each
// fires (late, if the clock moved past several at once), up to the
// catch-up limit. Neither depends on which readings of the clock Run
// happened to take between two moves of a mock: a retry is judged at the
// time it was due, not at the reading that found it due.
func (s *Scheduler) planLocked(e *entry, now time.Time) (fires []time.Time, save func() error) {
	var skipped int64
	var lastSkipped time.Time
	cursor := e.cursor
	missedUpTo := e.since
	if e.failures > 0 {
		if n, _ := e.spec.slotsThrough(cursor, e.retryAt); n > 1 {
			missedUpTo = laterOf(missedUpTo, e.retryAt)
		}
	}
	if cursor.Before(missedUpTo) {
		keep := 1
		if e.cfg.missed == MissedEach {
			keep = e.cfg.limit
		}
		before, lastBefore, missed := candidates(e.spec, cursor, missedUpTo, keep)
		skipped, lastSkipped = before, lastBefore
		if e.cfg.missed == MissedSkip && len(missed) == 1 && missedUpTo.Sub(missed[0].Add(e.jitterOf(missed[0]))) > e.cfg.grace {
			skipped, lastSkipped, missed = skipped+1, missed[0], nil
		}
		fires = missed
		cursor = missedUpTo
	}
	// Slots within the jitter of now may not be due yet; take enough of
	// the last ones that, without them, the limit remains.
	var notYet int64
	if e.cfg.jitter > 0 {
		notYet, _ = e.spec.slotsThrough(now.Add(-e.cfg.jitter), now)
	}
	before, lastBefore, live := candidates(e.spec, cursor, now, e.cfg.limit+int(notYet))
	for i, slot := range live {
		if slot.Add(e.jitterOf(slot)).After(now) {
			live = live[:i] // fires keep the order of their slots
			break
		}
	}
	if k := len(live) - e.cfg.limit; k > 0 {
		before, lastBefore, live = before+int64(k), live[k-1], live[k:]
	}
	if before > 0 { // past the limit: the missed ones before are given up too
		skipped, lastSkipped, fires = skipped+int64(len(fires))+before, lastBefore, nil
	}
	fires = append(fires, live...)
	if skipped > 0 {
		e.st.SkippedMissed += uint64(skipped)
		e.st.LastSkipped = lastSkipped
		save = s.advanceLocked(e, lastSkipped)
	}
	return fires, save
}

// candidates returns the last (up to) keep slots of spec in (after, upto]
// and how many came before them, with the last of those.
func candidates(spec Spec, after, upto time.Time, keep int) (before int64, lastBefore time.Time, tail []time.Time) {
	if !upto.After(after) {
		return 0, time.Time{}, nil
	}
	if spec.every > 0 {
		n, last := spec.slotsThrough(after, upto)
		if n == 0 {
			return 0, time.Time{}, nil
		}
		k := min(n, int64(keep))
		first := last.Add(-time.Duration(k-1) * spec.every)
		for i := range k {
			tail = append(tail, first.Add(time.Duration(i)*spec.every))
		}
		if before = n - k; before > 0 {
			lastBefore = first.Add(-spec.every)
		}
		return before, lastBefore, tail
	}
	for t := spec.Next(after); !t.IsZero() && !t.After(upto); t = spec.Next(t) {
		if len(tail) == keep {
			before, lastBefore = before+1, tail[0]
			tail = append(tail[:0], tail[1:]...)
		}
		tail = append(tail, t)
	}
	return before, lastBefore, tail
}

// execute fires the planned slots of e in order, stopping at the first
// failure (the slot stays pending, to be retried) or when e is paused or
// removed meanwhile.
func (s *Scheduler) execute(ctx context.Context, e *entry, fires []time.Time) {
	for _, slot := range fires {
		s.mu.Lock()
		stop := e.removed || e.st.Paused
		s.mu.Unlock()
		if stop || ctx.Err() != nil {
			return
		}
		if e.cfg.busy != nil {
			busy, err := e.cfg.busy(ctx)
			if err != nil {
				s.retryLater(e, err)
				return
			}
			if busy {
				s.mu.Lock()
				e.st.SkippedBusy++
				e.st.LastSkipped = slot
				save := s.advanceLocked(e, slot)
				s.mu.Unlock()
				s.saved(e, save)
				continue
			}
		}
		if err := call(ctx, e.job, Fire{Schedule: e.name, Slot: slot, DedupID: dedupID(e.name, slot)}); err != nil {
			s.retryLater(e, err)
			return
		}
		s.mu.Lock()
		e.st.Fired++
		e.st.LastSlot, e.st.LastFired = slot, s.clk.Now()
		save := s.advanceLocked(e, slot)
		s.mu.Unlock()
		s.saved(e, save)
	}
}

// advanceLocked marks every slot of e up to slot handled and returns the
// Store save that records it (nil without a store).
func (s *Scheduler) advanceLocked(e *entry, slot time.Time) (save func() error) {
	e.cursor, e.next = slot, e.spec.Next(slot)
	e.failures, e.retryAt = 0, time.Time{}
	if s.store == nil {
		return nil
	}
	name := e.name
	return func() error { return s.store.Save(name, slot) }
}

// saved runs a Store save outside the lock and counts its failure.
func (s *Scheduler) saved(e *entry, save func() error) {
	if save == nil {
		return
	}
	if err := save(); err != nil {
		s.mu.Lock()
		s.failedLocked(e, err)
		s.mu.Unlock()
	}
}

// retryLater counts a failed fire of e's pending slot and puts off its
// next try by the retry policy's delay.
func (s *Scheduler) retryLater(e *entry, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failedLocked(e, err)
	e.failures++
	e.retryAt = s.clk.Now().Add(s.retry.Delay(e.failures))
}

func (s *Scheduler) failedLocked(e *entry, err error) {
	e.st.Failures++
	e.st.LastError, e.st.LastErrorAt = err.Error(), s.clk.Now()
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// call runs job, turning a panic into its error (a *queue.PanicError
// with the stack), so that one schedule's bug fails its fires, which are
// retried and counted, and does not end Run or the process.
func call(ctx context.Context, job Job, f Fire) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &queue.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return job(ctx, f)
}
