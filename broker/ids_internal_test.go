package broker

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestNewIDVersionAndVariant(t *testing.T) {
	p := newIDPool()
	for range 1000 {
		id := p.newID()
		if id.Version() != 8 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("%v: version %d, variant %v; want 8, RFC4122", id, id.Version(), id.Variant())
		}
	}
}

// One pool's IDs share its prefix and count up by one in their last 62
// bits; the prefix is random: over many pools each of its 60 free bits is
// set in about half of them (a bit stuck at 0 or 1, a prefix drawn once
// per process, fails by dozens of standard deviations, so the test cannot
// flake), and so is each bit of the counter's start below bit 61.
func TestNewIDLayout(t *testing.T) {
	p := newIDPool()
	first := p.newID()
	for i := range uint64(100) {
		id := p.newID()
		if !bytes.Equal(id[:8], first[:8]) {
			t.Fatalf("ID %d: prefix %x, want the pool's %x", i+1, id[:8], first[:8])
		}
		got := binary.BigEndian.Uint64(id[8:]) & (1<<62 - 1)
		if want := binary.BigEndian.Uint64(first[8:])&(1<<62-1) + i + 1; got != want {
			t.Fatalf("ID %d: counter %d, want %d", i+1, got, want)
		}
	}

	const n = 4096 // a bit set in 2048 ± 32 (one standard deviation)
	var ones [128]int
	for range n {
		id := newIDPool().newID()
		for i := range 128 {
			ones[i] += int(id[i/8] >> (7 - i%8) & 1)
		}
	}
	for i, c := range ones {
		switch {
		case i >= 48 && i < 52: // version: 1000
			if want := [4]int{n, 0, 0, 0}[i-48]; c != want {
				t.Errorf("version bit %d set %d times, want %d", i-48, c, want)
			}
		case i == 64 || i == 65: // variant: 10
			if want := [2]int{n, 0}[i-64]; c != want {
				t.Errorf("variant bit %d set %d times, want %d", i-64, c, want)
			}
		case i == 66: // the counter starts below 2⁶¹ (its bit 61 is clear)
			if c != 0 {
				t.Errorf("counter bit 61 set in %d first IDs, want 0", c)
			}
		case c < n*3/10 || c > n*7/10:
			t.Errorf("bit %d set in %d of %d pools' first IDs", i, c, n)
		}
	}
}

// The counter wraps within its 62 bits: the variant stays, and the prefix.
func TestNewIDCounterWraps(t *testing.T) {
	p := newIDPool()
	p.next.Store(1<<62 - 2)
	a, b := p.newID(), p.newID()
	if got := binary.BigEndian.Uint64(a[8:]); got != 1<<63|(1<<62-1) {
		t.Errorf("last before the wrap: %x", got)
	}
	if got := binary.BigEndian.Uint64(b[8:]); got != 1<<63 {
		t.Errorf("first after the wrap: %x, want %x", got, uint64(1<<63))
	}
	if b.Version() != 8 || b.Variant() != uuid.RFC4122 {
		t.Errorf("%v after the wrap: version %d, variant %v", b, b.Version(), b.Variant())
	}
}

// Publishers on many goroutines share a broker's pool; no two get the
// same ID (and -race sees no data race).
func TestNewIDUniqueUnderConcurrency(t *testing.T) {
	const goroutines, each = 16, 20000
	p := newIDPool()
	ids := make([][]uuid.UUID, goroutines)
	var wg sync.WaitGroup
	for g := range ids {
		wg.Go(func() {
			ids[g] = make([]uuid.UUID, each)
			for i := range ids[g] {
				ids[g][i] = p.newID()
			}
		})
	}
	wg.Wait()
	seen := make(map[uuid.UUID]bool, goroutines*each)
	for _, s := range ids {
		for _, id := range s {
			if seen[id] {
				t.Fatalf("%v drawn twice", id)
			}
			seen[id] = true
		}
	}
}

// Two brokers in one process never hand out the same ID: their prefixes
// differ. (Across processes, as across a restart, the runtime's generator
// is seeded anew from the operating system.)
func TestNewIDTwoPoolsNeverCollide(t *testing.T) {
	const n = 100000
	a, b := newIDPool(), newIDPool()
	seen := make(map[uuid.UUID]bool, 2*n)
	for range n {
		for _, id := range [2]uuid.UUID{a.newID(), b.newID()} {
			if seen[id] {
				t.Fatalf("%v drawn twice", id)
			}
			seen[id] = true
		}
	}
}

func TestNewIDAllocatesNothing(t *testing.T) {
	p := newIDPool()
	var id uuid.UUID
	if n := testing.AllocsPerRun(1000, func() { id = p.newID() }); n != 0 {
		t.Errorf("newID: %v allocations, want 0", n)
	}
	_ = id
}
