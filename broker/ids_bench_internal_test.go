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
// was chosen over (issue 15). Run it with -cpu 1,2: under RunParallel the
// 2-CPU case shows what publishers on two cores pay for shared state.
//
//	old:     the pool before issue 15, v4 cut from a mutex-guarded buffer
//	         of crypto/rand bytes refilled 256 IDs at a time
//	new:     idPool (v4 from the runtime's per-thread ChaCha8)
//	counter: v8, a random per-pool 60-bit prefix and an atomic 62-bit
//	         counter from a random start (padded to its own cache line)
//	v7:      UUIDv7, wall-clock milliseconds and a 12-bit counter kept
//	         monotonic with a CAS loop, rand_b drawn as new draws its bits
//	crypto:  v4 from crypto/rand.Read per ID (vDSO getrandom on Linux 6.11+)
func BenchmarkNewID(b *testing.B) {
	for _, c := range []struct {
		name string
		id   func() uuid.UUID
	}{
		{"impl=old", newOldIDPool().newID},
		{"impl=new", newIDPool().newID},
		{"impl=counter", newCounterIDs().newID},
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

type counterIDs struct {
	hi   uint64 // random, with version 8 in bits 12-15
	_    [56]byte
	next atomic.Uint64
	_    [56]byte
}

func newCounterIDs() *counterIDs {
	var r [16]byte
	rand.Read(r[:])
	p := &counterIDs{hi: binary.BigEndian.Uint64(r[:8])&^(0xf<<12) | 8<<12}
	p.next.Store(binary.BigEndian.Uint64(r[8:]) >> 3) // below 2⁶¹: 2⁶¹ IDs before the 62 bits wrap
	return p
}

func (p *counterIDs) newID() uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], p.hi)
	binary.BigEndian.PutUint64(id[8:], p.next.Add(1)&(1<<62-1)|1<<63)
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
			binary.LittleEndian.PutUint64(id[8:], mrand.Uint64()) // rand_b, as new draws it
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
