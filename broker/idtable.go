package broker

import (
	"hash/maphash"
	"math"
	"weak"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/queue"
)

// idTable is the set of a topic's remembered dedup IDs: each with the ID
// of the message it named and when that was first published, oldest
// first. It is built to be cheap per ID, so that a service can keep a
// window's worth of them: a 40-byte slot in a queue of fixed-size chunks
// (FIFO: IDs expire in the order they came), and a 4-byte entry in an
// open-addressing index from the ID's hash to its slot, with a byte of the
// hash beside each entry, so that a probe passes the entries of other IDs
// without reading their slots (a new ID passes a few). The message itself
// is held only weakly: while a subscription still holds it, a duplicate can
// be answered with it; once it is settled, the garbage collector takes it.
// Not safe for concurrent use: the dedup's lock guards it.
type idTable[T any] struct {
	chunks [][]idSlot[T] // chunks[0][first:], then whole chunks, the last up to its length
	first  int           // the oldest slot's offset in chunks[0]
	base   uint32        // the sequence number of chunks[0][0]
	next   uint32        // the sequence number of the next slot
	live   int           // slots whose id is set
	// index maps an ID's hash to its slot, by linear probing: 0 is empty,
	// v is the slot numbered v-1 (mod 2^32: fewer than 2^32 slots are ever
	// held). Its length is a power of two, at most 3/4 full.
	index []uint32
	tags  []uint8 // beside index: the top byte of the hash of its ID
	seed  maphash.Seed
	sweep uint32 // the next slot whose weak pointer put looks at
}

// idSlot is one remembered ID.
type idSlot[T any] struct {
	id   string // "" once removed
	msg  uuid.UUID
	at   int64                          // the first publish, Unix nanoseconds
	orig weak.Pointer[queue.Message[T]] // the stored message, while something holds it
}

const idChunk = 512

func (t *idTable[T]) len() int { return t.live }

// slot returns the slot numbered seq.
func (t *idTable[T]) slot(seq uint32) *idSlot[T] {
	off := int(seq - t.base)
	return &t.chunks[off/idChunk][off%idChunk]
}

// home returns where id's probe starts in the index, and its tag.
func (t *idTable[T]) home(id string) (int, uint8) {
	h := maphash.String(t.seed, id)
	return int(h & uint64(len(t.index)-1)), uint8(h >> 56)
}

// find returns id's position in the index, or -1.
func (t *idTable[T]) find(id string) int {
	if len(t.index) == 0 {
		return -1
	}
	mask := len(t.index) - 1
	i, tag := t.home(id)
	for ; ; i = (i + 1) & mask {
		v := t.index[i]
		if v == 0 {
			return -1
		}
		if t.tags[i] == tag && t.slot(v-1).id == id {
			return i
		}
	}
}

// get returns id's slot.
func (t *idTable[T]) get(id string) (idSlot[T], bool) {
	if i := t.find(id); i >= 0 {
		return *t.slot(t.index[i] - 1), true
	}
	return idSlot[T]{}, false
}

// put remembers id, replacing an older entry of it, as the newest; orig
// is the stored message, or nil.
func (t *idTable[T]) put(id string, msg uuid.UUID, at int64, orig *queue.Message[T]) {
	s := t.add(id, msg, at)
	if orig != nil {
		s.orig = weak.Make(orig)
	}
	t.sweepSome(16)
}

// add remembers id, replacing an older entry of it, as the newest, without
// a message, and returns its slot.
func (t *idTable[T]) add(id string, msg uuid.UUID, at int64) *idSlot[T] {
	t.remove(id)
	if t.next == math.MaxUint32 { // its v would be 0: leave the number unused
		t.push(idSlot[T]{})
	}
	if (t.live+1)*4 > len(t.index)*3 { // before the new slot, which insert indexes
		t.rehash(max(2*len(t.index), 64))
	}
	seq := t.next
	t.push(idSlot[T]{id: id, msg: msg, at: at})
	t.live++
	t.insert(id, seq)
	return t.slot(seq)
}

// reserve makes room in the index for n more IDs at once: a restore of
// millions rehashes once, not at each doubling.
func (t *idTable[T]) reserve(n int) {
	size := max(len(t.index), 64)
	for (t.live+n)*4 > size*3 {
		size *= 2
	}
	if size > len(t.index) {
		t.rehash(size)
	}
}

// sweepSome looks at the weak pointers of the n slots after the sweep
// cursor and drops those whose message is gone, so that a settled
// message's ID does not keep the weak pointer's handle: with 16 a put
// (a few nanoseconds each), the cursor passes every slot again within a
// sixteenth as many puts as there are slots.
func (t *idTable[T]) sweepSome(n int) {
	oldest := t.base + uint32(t.first)
	for ; n > 0; n-- {
		if t.sweep-oldest >= t.next-oldest { // expired, or past the newest: start over
			t.sweep = oldest
		}
		if s := t.slot(t.sweep); s.orig != (weak.Pointer[queue.Message[T]]{}) && s.orig.Value() == nil {
			s.orig = weak.Pointer[queue.Message[T]]{}
		}
		t.sweep++
	}
}

func (t *idTable[T]) push(s idSlot[T]) {
	if n := len(t.chunks); n == 0 || len(t.chunks[n-1]) == idChunk {
		if n == 0 {
			t.base = t.next
		}
		t.chunks = append(t.chunks, make([]idSlot[T], 0, idChunk))
	}
	last := &t.chunks[len(t.chunks)-1]
	*last = append(*last, s)
	t.next++
}

func (t *idTable[T]) insert(id string, seq uint32) {
	mask := len(t.index) - 1
	i, tag := t.home(id)
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	t.index[i], t.tags[i] = seq+1, tag
}

// rehash makes the index n long (a power of two) and fills it again.
func (t *idTable[T]) rehash(n int) {
	t.index, t.tags = make([]uint32, n), make([]uint8, n)
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed()
	}
	t.each(func(seq uint32, s *idSlot[T]) bool {
		t.insert(s.id, seq)
		return true
	})
}

// remove forgets id, wherever its slot is; it reports whether it was there.
func (t *idTable[T]) remove(id string) bool {
	i := t.find(id)
	if i < 0 {
		return false
	}
	s := t.slot(t.index[i] - 1)
	*s = idSlot[T]{}
	t.live--
	// Backward-shift deletion: move up each entry after i, up to the next
	// empty one, that may not sit after the hole its removal leaves.
	mask := len(t.index) - 1
	for j := (i + 1) & mask; t.index[j] != 0; j = (j + 1) & mask {
		k, _ := t.home(t.slot(t.index[j] - 1).id)
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.index[i], t.tags[i] = t.index[j], t.tags[j]
			i = j
		}
	}
	t.index[i], t.tags[i] = 0, 0
	if len(t.index) > 1024 && t.live*8 < len(t.index) {
		t.rehash(len(t.index) / 4)
	}
	return true
}

// expire forgets the oldest IDs while expired says so, stopping at the
// first one it does not (the slots are in arrival order, which is the
// order of their times but for publishes that raced).
func (t *idTable[T]) expire(expired func(at int64) bool) {
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
func (t *idTable[T]) each(f func(seq uint32, s *idSlot[T]) bool) {
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
