package broker

import (
	"crypto/rand"
	"sync"

	"github.com/google/uuid"
)

// idPool hands out version 4 UUIDs cut from a buffer of random bytes that
// it refills 256 IDs at a time, so a publish costs neither a getrandom
// call nor an allocation for its ID. It is the idea behind
// uuid.EnableRandPool, kept per broker instead of process-wide.
type idPool struct {
	mu   sync.Mutex // guards everything below
	buf  [16 * 256]byte
	next int // offset of the next unused ID; len(buf) when empty
}

func newIDPool() *idPool { return &idPool{next: 16 * 256} }

func (p *idPool) newID() uuid.UUID {
	p.mu.Lock()
	if p.next == len(p.buf) {
		rand.Read(p.buf[:]) // never fails: crypto/rand crashes the program instead (Go 1.24+)
		p.next = 0
	}
	var id uuid.UUID
	copy(id[:], p.buf[p.next:p.next+16])
	p.next += 16
	p.mu.Unlock()
	id[6] = (id[6] & 0x0f) | 0x40 // version 4
	id[8] = (id[8] & 0x3f) | 0x80 // RFC 4122 variant
	return id
}
