package poller

import (
	"errors"
	"log/slog"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/queue"
)

// batchBuf is a batch worker's scratch, reused from call to call.
type batchBuf[T any] struct {
	ds        []queue.Delivery[T] // the handler's argument
	acks      []*item[T]          // the deliveries to ack together
	ids       []lease.ID          // their leases
	deadlines []time.Time         // their deadlines as last set
	firsts    map[string]int      // WithBatchByKey: each key's first place in a batch
}

func newBatchBuf[T any](n int) *batchBuf[T] {
	return &batchBuf[T]{
		ds:        make([]queue.Delivery[T], 0, n),
		acks:      make([]*item[T], 0, n),
		ids:       make([]lease.ID, 0, n),
		deadlines: make([]time.Time, 0, n),
	}
}

// ackAll acks the leases of its, deliveries whose handler succeeded, in
// one AckBatch, and frees their slots first, as finish does an Ack's: the
// next poll overlaps the call. A lease the source could not ack (its
// BatchError's entry, or the call's whole error) counts and reports as
// finish's failed settle does.
func (r *run[T]) ackAll(its []*item[T], buf *batchBuf[T]) {
	p := r.p
	ids, deadlines := buf.ids[:0], buf.deadlines[:0]
	for _, it := range its {
		deadlines = append(deadlines, r.untrack(it))
		ids = append(ids, it.d.LeaseID)
	}
	for range its {
		<-r.slots
	}
	err := p.batchAcker.AckBatch(ids)
	var be *queue.BatchError
	if err != nil && (!errors.As(err, &be) || len(be.Errs) != len(ids)) {
		be = nil // an error of the whole call: none acked
	}
	for i, it := range its {
		serr := err
		if be != nil {
			serr = be.Errs[i]
		}
		out := OutcomeAcked
		if serr != nil {
			p.errs.Add(1)
			p.logf(slog.LevelWarn, "poller: settling lease failed", "outcome", out, "lease", ids[i], "message", it.d.ID, "err", serr)
			out = OutcomeSettleFailed
		} else {
			p.acked.Add(1)
		}
		r.emit(out, &it.d, deadlines[i], nil, serr, it.batch)
		r.recycle(it)
	}
	clear(its)
}
