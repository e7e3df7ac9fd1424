package broker

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/google/uuid"
)

// idRuns finds the position of a message by its ID, among messages laid
// out in the order they were published, without a map for most of them:
// a topic's IDs are a prefix and a counter (see idPool), so a
// subscription's messages come in runs of IDs with increasing counters at
// consecutive positions, and a run finds each of its IDs by counting: a
// bit per counter in its range says which were noted, so a run also spans
// the gaps that a filter, or the acked messages a restore leaves out, make
// in the counters. The IDs outside the runs kept (a redriven message's,
// another topic's in a pattern subscription's, one after a gap of over
// maxGap) are in a map. Replay and restore use it for millions of
// messages, where a map of them all cost a third of the time.
//
// Its owner says what is at a position: each method that looks takes
// holds, which reports whether position i holds the message with that ID
// (not one removed, or moved away).
type idRuns struct {
	runs  []idRun
	index map[uuid.UUID]int // the IDs no run holds; nil until one comes
}

// idRun holds the IDs prefix|from+k for the k whose bit is set in bits,
// noted at consecutive positions from at in the order of k (the counters
// as big-endian numbers, as idPool makes them).
type idRun struct {
	prefix, from uint64
	at           int
	n            uint32   // IDs noted
	end          uint64   // one past the last k noted
	bits         []uint64 // bit k%64 of word k/64: from+k was noted
	cum          []uint32 // cum[w]: the IDs noted in the words before w
}

const (
	maxRuns = 16  // runs kept: the shortest goes to the map to make room
	maxGap  = 256 // the most counters a run spans between two IDs
)

func idHalves(id uuid.UUID) (prefix, ctr uint64) {
	return binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
}

// pos returns where the run noted the counter c, if it did.
func (r *idRun) pos(c uint64) (int, bool) {
	k := c - r.from
	if k >= r.end {
		return 0, false
	}
	w, bit := k/64, uint64(1)<<(k%64)
	if r.bits[w]&bit == 0 {
		return 0, false
	}
	return r.at + int(r.cum[w]) + bits.OnesCount64(r.bits[w]&(bit-1)), true
}

// extend notes counter c at the run's next position if c comes after its
// last within maxGap; it reports whether it did.
func (r *idRun) extend(c uint64) bool {
	k := c - r.from
	if k < r.end || k-r.end >= maxGap || r.n == math.MaxUint32 {
		return false
	}
	for uint64(len(r.bits)) <= k/64 {
		r.bits = append(r.bits, 0)
		r.cum = append(r.cum, r.n)
	}
	r.bits[k/64] |= 1 << (k % 64)
	r.n++
	r.end = k + 1
	return true
}

// find returns the position of the message with that ID.
func (x *idRuns) find(id uuid.UUID, holds func(int, uuid.UUID) bool) (int, bool) {
	p, c := idHalves(id)
	for i := range x.runs {
		r := &x.runs[i]
		if r.prefix != p {
			continue
		}
		if at, ok := r.pos(c); ok && holds(at, id) {
			return at, true
		}
	}
	i, ok := x.index[id]
	return i, ok
}

// note finds id at position i from now on: in the latest run if it
// extends it (at its next position), else in a run of its own.
func (x *idRuns) note(id uuid.UUID, i int, holds func(int, uuid.UUID) bool) {
	p, c := idHalves(id)
	if n := len(x.runs); n > 0 {
		if r := &x.runs[n-1]; r.prefix == p && r.at+int(r.n) == i && r.extend(c) {
			return
		}
	}
	if len(x.runs) == maxRuns {
		x.spill(holds)
	}
	x.runs = append(x.runs, idRun{prefix: p, from: c, at: i, n: 1, end: 1, bits: []uint64{1}, cum: []uint32{0}})
}

// spill moves the shortest run's IDs to the map.
func (x *idRuns) spill(holds func(int, uuid.UUID) bool) {
	k := 0
	for j, r := range x.runs {
		if r.n < x.runs[k].n {
			k = j
		}
	}
	r := &x.runs[k]
	if x.index == nil {
		x.index = map[uuid.UUID]int{}
	}
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], r.prefix)
	for w, word := range r.bits {
		for ; word != 0; word &= word - 1 {
			c := r.from + uint64(w*64+bits.TrailingZeros64(word))
			binary.BigEndian.PutUint64(id[8:], c)
			if at, _ := r.pos(c); holds(at, id) {
				x.index[id] = at
			}
		}
	}
	x.runs = slices.Delete(x.runs, k, k+1)
}

// forget drops id from the map, if it is there: its position no longer
// holds it. (A run needs nothing: holds says so.)
func (x *idRuns) forget(id uuid.UUID) { delete(x.index, id) }

// reset forgets every ID, for positions that are about to be noted anew.
func (x *idRuns) reset() { x.runs, x.index = x.runs[:0], nil }
