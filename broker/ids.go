package broker

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/google/uuid"
)

// idPool hands out message IDs: version 4 (random) UUIDs, RFC 9562
// section 5.4, whose 122 free bits come from the runtime's random
// generator (math/rand/v2's top-level functions). Since Go 1.22 that
// generator is ChaCha8, a cryptographic one, seeded from the operating
// system at process start, with its state per thread (per M), so an ID
// costs no syscall, no lock, no shared cache line and no allocation. The
// generator rekeys itself from its own output: nothing is ever read from
// the kernel after start.
//
// Uniqueness is a v4's: n IDs drawn anywhere (in one broker, in many, in
// the processes before and after a restart of a durable broker, whose
// replayed messages keep their IDs) collide with probability about
// n²/2¹²³; 10¹² IDs give about 10⁻¹³. Nothing wraps or runs out. One
// caveat, shared with any generator that keeps its state in memory: a
// process cloned from a VM snapshot repeats the IDs the original draws.
//
// Why version 4, and not a per-broker random prefix with an atomic counter
// (structural uniqueness within a broker) or a UUIDv7 (time-ordered), both
// measured in ids_bench_internal_test.go: a prefix and a counter is no v4
// (Version would change from 4 to 8 for users who print or check it),
// makes one ID guessable from another and shares a cache line among all
// publishers; a few ns faster on one core, slower on two, and neither
// shows in a Publish. A v7 reads the wall clock for every message, beside
// the injected clock, and costs about three times as much.
//
// The type holds nothing; it is kept so the broker has one place that
// says how its IDs are made. Its methods are safe for concurrent use.
type idPool struct{}

func newIDPool() *idPool { return &idPool{} }

func (*idPool) newID() uuid.UUID {
	var id uuid.UUID
	binary.LittleEndian.PutUint64(id[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(id[8:], rand.Uint64())
	id[6] = (id[6] & 0x0f) | 0x40 // version 4
	id[8] = (id[8] & 0x3f) | 0x80 // RFC 9562 (RFC 4122) variant
	return id
}
