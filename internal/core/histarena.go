package core

// histRef is where a history's records are in a histArena: its chunk,
// the offset of its region there, how many records it holds and how many
// its region has room for. 0 is none (a region has room for one at least).
type histRef uint64

func (r histRef) chunk() int { return int(r >> 24) }
func (r histRef) off() int   { return int(r >> 16 & 0xff) }
func (r histRef) len() int   { return int(r >> 8 & 0xff) }
func (r histRef) cap() int   { return int(r & 0xff) }
func (r histRef) withLen(n int) histRef {
	return r&^(0xff<<8) | histRef(n)<<8
}

// histChunkLen is how many records a chunk holds (8 KiB of them). A
// region has room for at most 36 (a redriven history of 9 grown fourfold;
// one of 16 or of MaxHistory moves down in place instead), so it fits, and
// its offset, length and room fit a byte each.
const histChunkLen = 256

// histArena holds attempt records in chunks that hold no pointer.
//
// Regions are cut one after the other from the chunk open now and are
// never cut again once released: a dead letter's history, a view of its
// region made under the lock and read after it (letter), stays as it was.
// A chunk whose regions are all released, other than the open one, is let
// go (the garbage collector frees it once no letter views it) and its
// index is used again for a new chunk.
type histArena struct {
	chunks []*[histChunkLen]attemptRec // by index; nil when let go
	live   []int32                     // by index: the regions not released
	free   []int                       // indices of chunks let go
	open   int                         // the chunk regions are cut from
	next   int                         // the first record of it not cut yet
}

// cut returns a region with room for c records, holding none.
func (a *histArena) cut(c int) histRef {
	if len(a.chunks) == 0 || a.next+c > histChunkLen {
		a.openChunk()
	}
	r := histRef(a.open)<<24 | histRef(a.next)<<16 | histRef(c)
	a.next += c
	a.live[a.open]++
	return r
}

// openChunk opens a new chunk, letting go of the one open before if no
// region of it is held.
func (a *histArena) openChunk() {
	was := -1
	if len(a.chunks) > 0 {
		was = a.open
	}
	if k := len(a.free); k > 0 {
		a.open, a.free = a.free[k-1], a.free[:k-1]
		a.chunks[a.open] = new([histChunkLen]attemptRec)
	} else {
		a.open = len(a.chunks)
		a.chunks = append(a.chunks, new([histChunkLen]attemptRec))
		a.live = append(a.live, 0)
	}
	a.next = 0
	if was >= 0 && a.live[was] == 0 {
		a.letGo(was)
	}
}

// release gives back the region r (0: none).
func (a *histArena) release(r histRef) {
	if r == 0 {
		return
	}
	i := r.chunk()
	if a.live[i]--; a.live[i] == 0 && i != a.open {
		a.letGo(i)
	}
}

func (a *histArena) letGo(i int) {
	a.chunks[i] = nil
	a.free = append(a.free, i)
}

// recs returns r's records, with its region's room beyond them (nil for 0).
func (a *histArena) recs(r histRef) []attemptRec {
	if r == 0 {
		return nil
	}
	off := r.off()
	return a.chunks[r.chunk()][off : off+r.len() : off+r.cap()]
}
