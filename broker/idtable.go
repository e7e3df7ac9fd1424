package broker

import (
	"hash/maphash"
	"math"

	"github.com/google/uuid"
)

// idTable is the set of a topic's remembered dedup IDs: each with the ID
// of the message it named and when that was first published, oldest
// first. It is built to be cheap per ID, so that a service can keep a
// window's worth of them: a 40-byte slot in a queue of fixed-size chunks
// (FIFO: IDs expire in the order they came), and a 4-byte entry in an
// open-addressing index from the ID's hash to its slot. No payload is
// kept. Not safe for concurrent use: the dedup's lock guards it.
type idTable struct {
	chunks [][]idSlot // chunks[0][first:], then whole chunks, the last up to its length
	first  int        // the oldest slot's offset in chunks[0]
	base   uint32     // the sequence number of chunks[0][0]
	next   uint32     // the sequence number of the next slot
	live   int        // slots whose id is set
	// index maps an ID's hash to its slot, by linear probing: 0 is empty,
	// v is the slot numbered v-1 (mod 2^32: fewer than 2^32 slots are ever
	// held). Its length is a power of two, at most 3/4 full.
	index []uint32
	seed  maphash.Seed
}

// idSlot is one remembered ID.
type idSlot struct {
	id  string // "" once removed
	msg uuid.UUID
	at  int64 // the first publish, Unix nanoseconds
}

const idChunk = 512

func (t *idTable) len() int { return t.live }

// slot returns the slot numbered seq.
func (t *idTable) slot(seq uint32) *idSlot {
	off := int(seq - t.base)
	return &t.chunks[off/idChunk][off%idChunk]
}

func (t *idTable) home(id string) int {
	return int(maphash.String(t.seed, id) & uint64(len(t.index)-1))
}

// find returns id's position in the index, or -1.
func (t *idTable) find(id string) int {
	if len(t.index) == 0 {
		return -1
	}
	mask := len(t.index) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		v := t.index[i]
		if v == 0 {
			return -1
		}
		if t.slot(v-1).id == id {
			return i
		}
	}
}

// get returns id's slot.
func (t *idTable) get(id string) (idSlot, bool) {
	if i := t.find(id); i >= 0 {
		return *t.slot(t.index[i] - 1), true
	}
	return idSlot{}, false
}

// put remembers id, replacing an older entry of it, as the newest.
func (t *idTable) put(id string, msg uuid.UUID, at int64) {
	t.remove(id)
	if t.next == math.MaxUint32 { // its v would be 0: leave the number unused
		t.push(idSlot{})
	}
	if (t.live+1)*4 > len(t.index)*3 { // before the new slot, which insert indexes
		t.rehash(max(2*len(t.index), 64))
	}
	seq := t.next
	t.push(idSlot{id: id, msg: msg, at: at})
	t.live++
	t.insert(id, seq)
}

func (t *idTable) push(s idSlot) {
	if n := len(t.chunks); n == 0 || len(t.chunks[n-1]) == idChunk {
		if n == 0 {
			t.base = t.next
		}
		t.chunks = append(t.chunks, make([]idSlot, 0, idChunk))
	}
	last := &t.chunks[len(t.chunks)-1]
	*last = append(*last, s)
	t.next++
}

func (t *idTable) insert(id string, seq uint32) {
	mask := len(t.index) - 1
	i := t.home(id)
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	t.index[i] = seq + 1
}

// rehash makes the index n long (a power of two) and fills it again.
func (t *idTable) rehash(n int) {
	t.index = make([]uint32, n)
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed()
	}
	t.each(func(seq uint32, s *idSlot) bool {
		t.insert(s.id, seq)
		return true
	})
}

// remove forgets id, wherever its slot is; it reports whether it was there.
func (t *idTable) remove(id string) bool {
	i := t.find(id)
	if i < 0 {
		return false
	}
	s := t.slot(t.index[i] - 1)
	*s = idSlot{}
	t.live--
	// Backward-shift deletion: move up each entry after i, up to the next
	// empty one, that may not sit after the hole its removal leaves.
	mask := len(t.index) - 1
	for j := (i + 1) & mask; t.index[j] != 0; j = (j + 1) & mask {
		k := t.home(t.slot(t.index[j] - 1).id)
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.index[i] = t.index[j]
			i = j
		}
	}
	t.index[i] = 0
	if len(t.index) > 1024 && t.live*8 < len(t.index) {
		t.rehash(len(t.index) / 4)
	}
	return true
}

// expire forgets the oldest IDs while expired says so, stopping at the
// first one it does not (the slots are in arrival order, which is the
// order of their times but for publishes that raced).
func (t *idTable) expire(expired func(at int64) bool) {
	for len(t.chunks) > 0 {
		c := t.chunks[0]
		if t.first == len(c) {
			if len(c) < idChunk { // the last chunk, used up: start over
				t.chunks, t.first = t.chunks[:0], 0
				return
			}
			t.chunks[0] = nil
			t.chunks = t.chunks[1:]
			t.base += idChunk
			t.first = 0
			continue
		}
		s := &c[t.first]
		if s.id != "" {
			if !expired(s.at) {
				return
			}
			t.remove(s.id)
		}
		t.first++
	}
}

// each calls f with every remembered slot, oldest first, while f returns
// true.
func (t *idTable) each(f func(seq uint32, s *idSlot) bool) {
	seq := t.base + uint32(t.first)
	for ci, c := range t.chunks {
		from := 0
		if ci == 0 {
			from = t.first
		}
		for i := from; i < len(c); i++ {
			if c[i].id != "" && !f(seq+uint32(i-from), &c[i]) {
				return
			}
		}
		seq += uint32(len(c) - from)
	}
}
