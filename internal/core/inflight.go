package core

import (
	"github.com/leasebus/leasebus/internal/minheap"
)

// run is a FIFO of entries that arrive in their owner's order (leases by
// deadline, returned messages by place), so that pushing and popping them
// cost O(1) and touch memory in order, where a heap pays a sift through
// log n levels, a cache miss each, for every pop. That is what keeps the
// cost per message of 10⁶ leases expiring at once the cost at 10⁵ (issue
// 15). Any entry leaves in O(1): its slot becomes a hole, skipped at the
// ends and swept out when holes outnumber entries.
//
// The slots live in blocks of runBlock, so that a run growing under the
// queue's lock never copies a large array, nor allocates one (a large
// allocation can make the allocating goroutine assist the garbage
// collector for milliseconds, lock held). Each entry in a run keeps its
// logical position in index, as -2-pos (a heap's positions are >= 0, and
// -1 means none); positions count from the run's base, which moves past
// the blocks dropped from the front, so dropping them rewrites no entry.
type run[T any] struct {
	blocks [][]*entry[T] // the slots, from position base; full-length blocks
	base   int           // the position of blocks[0][0]
	head   int           // the position of the first entry (when n > 0)
	end    int           // the position after the last entry
	n      int           // entries (not holes) in [head, end)
	spare  []*entry[T]   // one emptied block kept for the next
}

// runBlock is how many slots a run's block holds (4 KiB).
const runBlock = 512

func (r *run[T]) len() int { return r.n }

func (r *run[T]) slot(pos int) **entry[T] {
	i := uint(pos - r.base)
	return &r.blocks[i/runBlock][i%runBlock]
}

func (r *run[T]) first() *entry[T] { return *r.slot(r.head) } // r.n > 0
func (r *run[T]) last() *entry[T]  { return *r.slot(r.end - 1) }

// push appends e, which must come after last() in the run's order.
func (r *run[T]) push(e *entry[T]) {
	if r.end-r.base == len(r.blocks)*runBlock {
		b := r.spare
		r.spare = nil
		if b == nil {
			b = make([]*entry[T], runBlock)
		}
		r.blocks = append(r.blocks, b)
	}
	*r.slot(r.end) = e
	e.index = int32(-2 - r.end)
	r.end++
	r.n++
	if r.end >= maxRunPos {
		r.rebase()
	}
}

// maxRunPos bounds a run's positions, so that an entry's index (an int32)
// holds them; past it the run renumbers.
const maxRunPos = 1 << 30

// rebase renumbers the run from position 0 at its base: base only grows
// (as blocks are dropped from the front), so a run that never empties
// would otherwise outgrow an int32 after a billion pushes. It rewrites
// every entry's index, once per maxRunPos pushes at most.
func (r *run[T]) rebase() {
	shift := r.base
	for pos := r.head; pos < r.end; pos++ {
		if e := *r.slot(pos); e != nil {
			e.index = int32(-2 - (pos - shift))
		}
	}
	r.base -= shift
	r.head -= shift
	r.end -= shift
}

// pop removes and returns the first entry.
func (r *run[T]) pop() *entry[T] {
	p := r.slot(r.head)
	e := *p
	*p = nil
	e.index = -1
	r.n--
	r.head++
	r.settle()
	return e
}

// remove takes e, which must be in r, out of it.
func (r *run[T]) remove(e *entry[T]) {
	pos := -2 - int(e.index)
	*r.slot(pos) = nil
	e.index = -1
	r.n--
	if pos == r.head {
		r.head++
	}
	if pos == r.end-1 {
		r.end--
		for r.end > r.head && *r.slot(r.end - 1) == nil {
			r.end--
		}
	}
	if r.end-r.head-r.n >= max(r.n, minCompact) {
		r.compact()
	}
	r.settle()
}

// settle moves head past the holes at the front and gives back the blocks
// that hold none of [head, end). An empty run starts again at its base,
// keeping its first block.
func (r *run[T]) settle() {
	if r.n == 0 {
		r.head, r.end = r.base, r.base
		if len(r.blocks) > 1 {
			for i, b := range r.blocks[1:] {
				r.spare = b
				r.blocks[1+i] = nil
			}
			r.blocks = r.blocks[:1]
		}
		return
	}
	for *r.slot(r.head) == nil {
		r.head++
	}
	for r.head-r.base >= runBlock { // the first block is consumed
		r.spare = r.blocks[0]
		r.blocks[0] = nil
		r.blocks = r.blocks[1:]
		r.base += runBlock
	}
	if used := (r.end - r.base + runBlock - 1) / runBlock; used < len(r.blocks) {
		for i := used; i < len(r.blocks); i++ {
			r.spare = r.blocks[i]
			r.blocks[i] = nil
		}
		r.blocks = r.blocks[:used]
	}
}

// minCompact is the least number of holes a run sweeps out at once.
const minCompact = 1024

// compact moves the entries together from head on, closing the holes.
// It costs one pass over [head, end), paid for by the holes' removals.
func (r *run[T]) compact() {
	j := r.head
	for i := r.head; i < r.end; i++ {
		if e := *r.slot(i); e != nil {
			*r.slot(i) = nil
			*r.slot(j) = e
			e.index = int32(-2 - j)
			j++
		}
	}
	r.end = j
}

// inflight is the in-flight table: every leased entry by (deadline, lease
// order), so that the earliest expiry is found in O(1). A lease's deadline
// is now plus a timeout that rarely changes, so leases mostly arrive in
// deadline order: those go to a run, where expiring and acking them is
// O(1); the others (an earlier deadline than the run's last: an extended
// lease, a shorter PollWithVisibility, a clock set back) go to a heap.
// Popping compares the two heads. Every method needs the queue's lock.
type inflight[T any] struct {
	run   run[T]
	heap  minheap.Heap[*entry[T]] // by (deadline, stamp)
	stamp uint64                  // the last lease order handed out
}

func newInflight[T any]() inflight[T] {
	return inflight[T]{heap: minheap.Heap[*entry[T]]{
		Less:     byDeadline[T],
		SetIndex: func(e *entry[T], i int) { e.index = int32(i) },
	}}
}

// byDeadline orders leases by deadline, then lease order: equal deadlines
// expire first in, first out.
func byDeadline[T any](a, b *entry[T]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.stamp < b.stamp
}

// Len returns the number of leases.
func (f *inflight[T]) Len() int { return f.run.len() + f.heap.Len() }

// Push adds e, whose deadline (at) is set, as the latest lease.
func (f *inflight[T]) Push(e *entry[T]) {
	f.stamp++
	e.stamp = f.stamp
	if f.run.len() == 0 || e.at >= f.run.last().at {
		f.run.push(e)
		return
	}
	f.heap.Push(e)
}

// Remove takes e, which must be in f, out of it.
func (f *inflight[T]) Remove(e *entry[T]) {
	if e.index >= 0 {
		f.heap.Remove(int(e.index))
		return
	}
	f.run.remove(e)
}

// SetDeadline moves the deadline of e, which must be in f. It keeps its
// lease order.
func (f *inflight[T]) SetDeadline(e *entry[T], deadline tick) {
	if e.index >= 0 {
		e.at = deadline
		f.heap.Fix(int(e.index))
		return
	}
	f.run.remove(e)
	e.at = deadline
	f.heap.Push(e)
}

// Peek returns the lease with the earliest deadline, or nil.
func (f *inflight[T]) Peek() *entry[T] {
	var e *entry[T]
	if f.run.len() > 0 {
		e = f.run.first()
	}
	if f.heap.Len() > 0 && (e == nil || byDeadline(f.heap.S[0], e)) {
		e = f.heap.S[0]
	}
	return e
}

// PopExpired removes and returns the lease with the earliest deadline if
// it has expired at now (now >= deadline), else returns nil.
func (f *inflight[T]) PopExpired(now tick) *entry[T] {
	e := f.Peek()
	if e == nil || now < e.at {
		return nil
	}
	if e.index >= 0 {
		f.heap.Remove(int(e.index))
	} else {
		f.run.pop()
	}
	return e
}
