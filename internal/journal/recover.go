package journal

import (
	"fmt"
	"os"
	"slices"
)

// listSegments returns the numbers of dir's seg-NNNNNNNN.log files and of
// its seg-NNNNNNNN.tmp files, each in order: the journal's name space. Any
// other name, seg-NNNNNNNN.log.corrupt included, is not the journal's.
func listSegments(dir string) (segs []int, tmps []int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		name := e.Name()
		var n int
		if _, err := fmt.Sscanf(name, "seg-%08d.", &n); err != nil || n < 0 {
			continue
		}
		switch name {
		case segFileName(n):
			segs = append(segs, n)
		case tmpFileName(n):
			tmps = append(tmps, n)
		}
	}
	slices.Sort(segs)
	slices.Sort(tmps)
	return segs, tmps, nil
}

// recover proves the journal, replays its live segment and opens it for
// appending. The bodies replay gets are views of the segment as mapped:
// j.release lets go of it (see Replayed).
func (j *Journal) recover(replay func([]byte) error) (_ Info, err error) {
	segs, tmps, err := listSegments(j.dir)
	if err != nil {
		return Info{}, err
	}
	c, err := prove(j.dir, segs, tmps, true)
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			c.release()
		} else {
			j.release = c.release
		}
	}()
	j.seg = c.seg
	info := Info{Segment: c.seg, Legacy: c.legacy}
	off := len(c.data)
	if c.seg != 0 {
		// j.segCRC: of what stays once a torn tail is cut
		off, info.Records, j.segCRC, err = replaySegment(c, j.segPath(j.seg), replay)
		if err != nil {
			return Info{}, err
		}
	}
	// The chain is proven and the live segment replays: only now change
	// the directory.
	for _, p := range c.stale { // superseded segments, an interrupted Rewrite
		if err := os.Remove(p); err != nil {
			return Info{}, err
		}
	}
	if c.seg == 0 { // a new journal: its first segment, whole before it has a name
		j.seg, info.Segment = 1, 1
		size, sum, _, err := writeSegment(j.dir, header{seq: 1}, func(func([]byte)) error { return nil })
		if err != nil {
			return Info{}, err
		}
		off, j.segCRC, c.start, c.sealed = int(size), sum, int(headerFrame), true
	}
	path := j.segPath(j.seg)
	j.f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Info{}, err
	}
	if off < len(c.data) {
		info.TruncatedBytes = int64(len(c.data) - off)
		if err := j.f.Truncate(int64(off)); err != nil {
			j.f.Close()
			return Info{}, err
		}
		if err := fdatasync(j.f); err != nil {
			j.f.Close()
			return Info{}, err
		}
	}
	info.Bytes = int64(off)
	j.segLen = info.Bytes
	j.size = info.Bytes - int64(c.start)
	if c.sealed {
		j.size -= endFrame
	}
	j.base = j.size
	if err := syncDir(j.dir); err != nil {
		j.f.Close()
		return Info{}, err
	}
	return info, nil
}
