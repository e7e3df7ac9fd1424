package broker

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	"github.com/google/uuid"
)

// idPool hands out a topic's message IDs: version 8 UUIDs (RFC 9562
// section 5.8, the custom layout) made of a random prefix drawn once per
// topic and a counter. The first 8 bytes are the prefix (60 random bits
// and the version); the last 8 are the variant and a 62-bit counter that
// starts at a random value below 2⁶¹ and grows by one per ID.
//
// Uniqueness: within a topic it is structural (2⁶¹ IDs before the
// counter could come back to where it started). Two topics, of one broker
// or of many, in one process or in the processes before and after a
// restart of a durable broker (whose replayed messages keep their IDs,
// while new ones get the topic's new prefix), share IDs only if they drew
// the same 60-bit prefix and counters that meet: for 10⁶ topics the chance
// of even a shared prefix is about 10¹²/2⁶¹, 4·10⁻⁷. The randomness
// comes from the runtime's generator (ChaCha8, seeded from the operating
// system at process start). One caveat, shared with any generator that
// keeps its state in memory: a process cloned from a VM snapshot repeats
// the prefixes the original draws.
//
// Why not version 4: 122 random bits per ID are two draws of the runtime's
// generator on every Publish, and a counter is cheaper (docs/BENCHMARKS.md
// has the figures). What that costs users: one ID tells the next (IDs were
// never secrets: leases are named by lease IDs), and a topic's publishers
// add to one counter. That is why the counter is the topic's and not the
// broker's: publishers of one topic already share its subscriptions'
// inboxes (every Publish claims a slot in each), while publishers of
// different topics share nothing, as with random IDs; one counter for all
// of them would make them contend. Nothing reads an ID's version or its
// bits; the broker only compares IDs.
//
// Its methods are safe for concurrent use.
type idPool struct {
	prefix uint64   // random, with version 8 in bits 12-15 (byte 6's high nibble)
	_      [56]byte // next on a line of its own: publishers write it, every ID reads prefix
	next   atomic.Uint64
	_      [56]byte
}

func newIDPool() *idPool {
	p := new(idPool)
	p.init()
	return p
}

// init draws the pool's prefix and where its counter starts.
func (p *idPool) init() {
	p.prefix = rand.Uint64()&^(0xf<<12) | 8<<12
	p.next.Store(rand.Uint64() >> 3) // below 2⁶¹
}

func (p *idPool) newID() uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], p.prefix)
	binary.BigEndian.PutUint64(id[8:], p.next.Add(1)&(1<<62-1)|1<<63) // variant 10: RFC 9562
	return id
}
