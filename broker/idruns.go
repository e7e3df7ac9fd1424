package broker

import (
	"encoding/binary"
	"slices"

	"github.com/google/uuid"
)

// idRuns finds the position of a message by its ID, among messages laid
// out in the order they were published, without a map for most of them:
// a topic's IDs are a prefix and a counter (see idPool), so a topic's
// messages come in runs of IDs one apart at consecutive positions, and a
// run finds each of its IDs by subtraction. The IDs outside the runs kept
// (a redriven message's, another topic's in a pattern subscription's) are
// in a map. Replay and restore use it for millions of messages, where a
// map of them all cost a third of the time.
//
// Its owner says what is at a position: each method that looks takes
// holds, which reports whether position i holds the message with that ID
// (not one removed, or moved away).
type idRuns struct {
	runs  []idRun
	index map[uuid.UUID]int // the IDs no run holds; nil until one comes
}

// idRun says that the IDs prefix|from+k, for k below n, were noted at the
// positions at+k (the counters as big-endian numbers, as idPool makes
// them).
type idRun struct {
	prefix, from uint64
	at, n        int
}

// maxRuns bounds the runs kept: the shortest goes to the map to make room.
const maxRuns = 16

func idHalves(id uuid.UUID) (prefix, ctr uint64) {
	return binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
}

// find returns the position of the message with that ID.
func (x *idRuns) find(id uuid.UUID, holds func(int, uuid.UUID) bool) (int, bool) {
	p, c := idHalves(id)
	for _, r := range x.runs {
		if k := c - r.from; r.prefix == p && k < uint64(r.n) && holds(r.at+int(k), id) {
			return r.at + int(k), true
		}
	}
	i, ok := x.index[id]
	return i, ok
}

// note finds id at position i from now on: in the latest run if it
// extends it, else in a run of its own.
func (x *idRuns) note(id uuid.UUID, i int, holds func(int, uuid.UUID) bool) {
	p, c := idHalves(id)
	if n := len(x.runs); n > 0 {
		if r := &x.runs[n-1]; r.prefix == p && r.from+uint64(r.n) == c && r.at+r.n == i {
			r.n++
			return
		}
	}
	if len(x.runs) == maxRuns {
		x.spill(holds)
	}
	x.runs = append(x.runs, idRun{prefix: p, from: c, at: i, n: 1})
}

// spill moves the shortest run's IDs to the map.
func (x *idRuns) spill(holds func(int, uuid.UUID) bool) {
	k := 0
	for j, r := range x.runs {
		if r.n < x.runs[k].n {
			k = j
		}
	}
	r := x.runs[k]
	if x.index == nil {
		x.index = map[uuid.UUID]int{}
	}
	for j := range r.n {
		var id uuid.UUID
		binary.BigEndian.PutUint64(id[:8], r.prefix)
		binary.BigEndian.PutUint64(id[8:], r.from+uint64(j))
		if holds(r.at+j, id) {
			x.index[id] = r.at + j
		}
	}
	x.runs = slices.Delete(x.runs, k, k+1)
}

// forget drops id from the map, if it is there: its position no longer
// holds it. (A run needs nothing: holds says so.)
func (x *idRuns) forget(id uuid.UUID) { delete(x.index, id) }

// reset forgets every ID, for positions that are about to be noted anew.
func (x *idRuns) reset() { x.runs, x.index = x.runs[:0], nil }
