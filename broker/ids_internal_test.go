package broker

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestNewIDVersionAndVariant(t *testing.T) {
	p := newIDPool()
	for range 1000 {
		id := p.newID()
		if id.Version() != 4 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("%v: version %d, variant %v; want 4, RFC4122", id, id.Version(), id.Variant())
		}
	}
}

// Every one of the 122 bits that are not version or variant is random:
// each is set in about half of the IDs. A bit stuck at 0 or 1 (a half
// left unfilled, a word drawn once and reused) fails by dozens of standard
// deviations, so the test cannot flake.
func TestNewIDBitsAreRandom(t *testing.T) {
	const n = 4096 // a bit set in 2048 ± 32 (one standard deviation)
	p := newIDPool()
	var ones [128]int
	for range n {
		id := p.newID()
		for i := range 128 {
			ones[i] += int(id[i/8] >> (7 - i%8) & 1)
		}
	}
	for i, c := range ones {
		switch {
		case i >= 48 && i < 52: // version: 0100
			if want := [4]int{0, n, 0, 0}[i-48]; c != want {
				t.Errorf("version bit %d set %d times, want %d", i-48, c, want)
			}
		case i == 64 || i == 65: // variant: 10
			if want := [2]int{n, 0}[i-64]; c != want {
				t.Errorf("variant bit %d set %d times, want %d", i-64, c, want)
			}
		case c < n*3/10 || c > n*7/10:
			t.Errorf("bit %d set in %d of %d IDs", i, c, n)
		}
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

// Two brokers in one process never hand out the same ID. (Across
// processes, as across a restart, the runtime's generator is seeded anew
// from the operating system.)
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
	if n := testing.AllocsPerRun(100, func() { _ = newIDPool() }); n != 0 {
		t.Errorf("newIDPool: %v allocations, want 0", n)
	}
	_ = id
}
