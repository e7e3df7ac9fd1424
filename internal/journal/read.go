package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNoJournal: Read found no journal in the directory.
var ErrNoJournal = errors.New("journal: no journal in the directory")

// readTries bounds Read's attempts when a Rewrite of the owning journal
// changes the directory while Read lists and reads it.
const readTries = 64

// Read replays dir's journal as Open would, without the lock and without
// changing anything: no file is created, cut or removed, so it may run
// while another process holds the journal open and appends to it. It sees
// the records whole at the moment it reads the live segment: a record the
// owner is still writing is a torn tail, left out (Info.TruncatedBytes
// says how much) and left alone. newReplay is called before each attempt
// and returns the function that gets that attempt's records: a Rewrite by
// the owner while Read lists and proves the segments makes Read start
// again, up to a few times.
//
// A directory without a journal (no segment) is ErrNoJournal; damage is a
// *CorruptError, as for Open.
func Read(dir string, newReplay func() func(body []byte) error) (Info, error) {
	var err error
	for range readTries {
		var info Info
		info, err = readOnce(dir, newReplay())
		// A segment gone between the listing and its reading, or a
		// listing that caught a Rewrite's rename half-way (its .tmp and
		// the segment it became, both): the owner moved on; look again. A
		// stray file stays, and fails every try.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errNotOurs) {
			return info, err
		}
		if _, serr := os.Stat(dir); serr != nil {
			return Info{}, serr // the directory itself is missing
		}
	}
	return Info{}, err
}

func readOnce(dir string, replay func([]byte) error) (Info, error) {
	segs, tmps, err := listSegments(dir)
	if err != nil {
		return Info{}, err
	}
	c, err := prove(dir, segs, tmps, false)
	if err != nil {
		return Info{}, err
	}
	if c.seg == 0 {
		return Info{}, ErrNoJournal
	}
	info := Info{Segment: c.seg, Legacy: c.legacy}
	end, records, _, err := replaySegment(c, filepath.Join(dir, segFileName(c.seg)), replay)
	if err != nil {
		return Info{}, err
	}
	info.Records = records
	info.Bytes = int64(end)
	info.TruncatedBytes = int64(len(c.data)) - info.Bytes
	return info, nil
}
