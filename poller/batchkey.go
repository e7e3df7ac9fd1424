package poller

import (
	"cmp"
	"slices"
)

// WithBatchByKey makes every call of a batch pool's handler (NewBatch)
// hold one ordering key's deliveries (queue.Delivery.Key; those without
// one, "", are a key of their own): a customer's digest, one API call per
// tenant. The pool gathers a batch as WithBatchMax says, then calls the
// handler once per key in it, one call after another, in the order of
// each key's first delivery, deliveries in their order within a call. A
// key's deliveries that arrive in different batches go to different
// calls. A call's outcomes, limits and events are a batch's. If the pool
// drains between the calls of a batch, the deliveries of the calls not
// made are released unspent. A subscription delivers one message of a key
// at a time unless it lets more be out at once (a broker's
// WithKeyConcurrency): allow a batch's worth for a key's batches to fill.
func WithBatchByKey() Option {
	return Option{func(c *config) { c.batchByKey = true }}
}

// processGroups runs the batch handler on items: once, or, WithBatchByKey,
// once per key (see there).
func (r *run[T]) processGroups(items []*item[T], buf *batchBuf[T]) {
	if !r.p.cfg.batchByKey {
		r.processBatch(items, buf)
		return
	}
	groupByKey(items, buf)
	rest := items
	defer func() {
		if len(rest) > 0 { // a handler's runtime.Goexit ended the worker between calls
			r.abandon(rest)
		}
	}()
	for len(rest) > 0 {
		n := 1
		for n < len(rest) && rest[n].d.Key == rest[0].d.Key {
			n++
		}
		if r.stopping.Load() || r.runCtx.Err() != nil || r.ctx.Err() != nil {
			break // the deferred abandon releases them
		}
		group := rest[:n]
		rest = rest[n:]
		r.processBatch(group, buf)
	}
}

// groupByKey orders items so that each key's are together, keys in the
// order of their first item, items in their order within a key.
func groupByKey[T any](items []*item[T], buf *batchBuf[T]) {
	if buf.firsts == nil {
		buf.firsts = make(map[string]int)
	}
	firsts := buf.firsts
	clear(firsts)
	grouped := true // already: each key's items are together
	for i, it := range items {
		if _, seen := firsts[it.d.Key]; !seen {
			firsts[it.d.Key] = i
		} else if items[i-1].d.Key != it.d.Key {
			grouped = false
		}
	}
	if grouped {
		return
	}
	slices.SortStableFunc(items, func(a, b *item[T]) int { return cmp.Compare(firsts[a.d.Key], firsts[b.d.Key]) })
}

// abandon releases items, a batch's deliveries gathered and not handed to
// a handler: unspent, as a drain does.
func (r *run[T]) abandon(items []*item[T]) {
	r.rest.gathered.Add(-int64(len(items)))
	for _, it := range items {
		r.release(it)
	}
}
