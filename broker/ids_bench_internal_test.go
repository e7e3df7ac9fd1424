package broker

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkNewID compares idPool with the ways of making message IDs it
// was chosen over. Run it with -cpu 1,2: under RunParallel the
// 2-CPU case shows what publishers on two cores pay for shared state.
//
//	old:     the first pool, v4 cut from a mutex-guarded buffer
//	         of crypto/rand bytes refilled 256 IDs at a time
//	new:     idPool (v8: a random per-pool prefix and an atomic counter)
//	v4:      v4 from the runtime's per-thread ChaCha8, two draws per ID
//	         (idPool until the counter replaced it)
//	v7:      UUIDv7, wall-clock milliseconds and a 12-bit counter kept
//	         monotonic with a CAS loop, rand_b drawn as v4 draws its bits
//	crypto:  v4 from crypto/rand.Read per ID (vDSO getrandom on Linux 6.11+)
func BenchmarkNewID(b *testing.B) {
	for _, c := range []struct {
		name string
		id   func() uuid.UUID
	}{
		{"impl=old", newOldIDPool().newID},
		{"impl=new", newIDPool().newID},
		{"impl=v4", v4ID},
		{"impl=v7", new(v7IDs).newID},
		{"impl=crypto", cryptoID},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var last uuid.UUID
				for pb.Next() {
					last = c.id()
				}
				sinkID = last
			})
		})
	}
}

var sinkID uuid.UUID

type oldIDPool struct {
	mu   sync.Mutex // guards everything below
	buf  [16 * 256]byte
	next int // offset of the next unused ID; len(buf) when empty
}

func newOldIDPool() *oldIDPool { return &oldIDPool{next: 16 * 256} }

func (p *oldIDPool) newID() uuid.UUID {
	p.mu.Lock()
	if p.next == len(p.buf) {
		rand.Read(p.buf[:])
		p.next = 0
	}
	var id uuid.UUID
	copy(id[:], p.buf[p.next:p.next+16])
	p.next += 16
	p.mu.Unlock()
	id[6] = (id[6] & 0x0f) | 0x40
	id[8] = (id[8] & 0x3f) | 0x80
	return id
}

func v4ID() uuid.UUID {
	var id uuid.UUID
	binary.LittleEndian.PutUint64(id[:8], mrand.Uint64())
	binary.LittleEndian.PutUint64(id[8:], mrand.Uint64())
	id[6] = (id[6] & 0x0f) | 0x40 // version 4
	id[8] = (id[8] & 0x3f) | 0x80 // RFC 9562 (RFC 4122) variant
	return id
}

type v7IDs struct {
	last atomic.Uint64 // unix ms << 12 | counter
	_    [56]byte
}

func (p *v7IDs) newID() uuid.UUID {
	ms := uint64(time.Now().UnixMilli())
	for {
		old := p.last.Load()
		next := max(ms<<12, old+1) // a 13th ID in one ms runs ahead of the clock
		if p.last.CompareAndSwap(old, next) {
			var id uuid.UUID
			binary.BigEndian.PutUint64(id[:8], next>>12<<16|7<<12|next&0xfff)
			binary.LittleEndian.PutUint64(id[8:], mrand.Uint64()) // rand_b, as v4 draws it
			id[8] = (id[8] & 0x3f) | 0x80
			return id
		}
	}
}

func cryptoID() uuid.UUID {
	var id uuid.UUID
	rand.Read(id[:])
	id[6] = (id[6] & 0x0f) | 0x40
	id[8] = (id[8] & 0x3f) | 0x80
	return id
}
