package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

// SalvageInfo describes what Salvage kept and cut.
type SalvageInfo struct {
	Records      int    // records kept: whole, checksummed and accepted by replay
	KeptBytes    int64  // the live segment's size after Salvage
	DroppedBytes int64  // bytes cut off its end
	Backup       string // the copy of the original segment ("" if nothing was changed)
	// Resealed: the live segment's snapshot was cut short (or its end
	// record damaged), so Salvage closed what was kept of it with a new end
	// record, which Open then accepts. What the snapshot held past the cut
	// is lost to the journal (the backup keeps it).
	Resealed bool
	// SetAside lists the files of the journal's name space that did not
	// belong to it (see Open), each renamed to its new name, which ends in
	// .corrupt or .corrupt.N.
	SetAside []string
}

// Salvage repairs a journal that Open refuses, as a separate, explicit step.
// It locks dir (ErrLocked if an open journal holds it). First, while Open
// would refuse a file as not belonging to the journal (see the package
// comment), it renames that file aside, to its name plus .corrupt (or
// .corrupt.1, .corrupt.2 and so on if that exists), and looks again: nothing
// is deleted. Then it keeps the live segment's longest prefix of whole,
// checksummed frames that replay also accepts, stopping at the first bad
// frame, the first bad snapshot end record or the first record replay
// refuses, whatever follows. If that is less than the whole segment, or
// the kept prefix ends inside the segment's snapshot (a cut snapshot: see
// Resealed), it first copies the original segment, byte for byte, to a
// .corrupt file beside it, fsyncs the copy and the
// directory, and only then cuts the segment to the kept prefix and fsyncs
// it. Everything after the cut is lost to the journal (the backup keeps
// it). A segment with nothing to cut, or no segment, is left alone:
// DroppedBytes is 0 and Backup "". After Salvage, Open succeeds (with a
// replay that accepts what replay accepted). A nil replay accepts every
// record.
func Salvage(dir string, replay func(body []byte) error) (SalvageInfo, error) {
	lock, err := lockDir(dir)
	if errors.Is(err, ErrLocked) {
		return SalvageInfo{}, err
	}
	if err != nil {
		return SalvageInfo{}, fmt.Errorf("journal: salvage: %w", err)
	}
	defer lock.Close()
	var info SalvageInfo
	var c chain
	for {
		segs, tmps, err := listSegments(dir)
		if err == nil {
			c, err = prove(dir, segs, tmps, false)
		}
		var ce *CorruptError
		if err == nil {
			break
		}
		if !errors.Is(err, errNotOurs) || !errors.As(err, &ce) {
			return info, fmt.Errorf("journal: salvage: %w", err)
		}
		aside, err := setAside(ce.Path)
		if err != nil {
			return info, fmt.Errorf("journal: salvage: %w", err)
		}
		info.SetAside = append(info.SetAside, aside)
	}
	if c.seg == 0 {
		return info, nil
	}
	path := filepath.Join(dir, segFileName(c.seg))
	data := c.data
	sealedAt, pos := -1, c.start
	off, _ := scanFrames(data[c.start:], func(body []byte) error {
		at := pos
		pos += 8 + len(body)
		if e, isEnd, err := parseEnd(body); isEnd {
			if err != nil || !c.sealed || sealedAt >= 0 || !e.describes(data[:at], info.Records) {
				return errStop // a bad end record: the kept prefix ends before it
			}
			sealedAt = at
			return nil
		}
		if replay != nil {
			if err := replay(body); err != nil {
				return err // the kept prefix ends before this record
			}
		}
		info.Records++
		return nil
	})
	off += c.start
	info.KeptBytes = int64(off)
	var seal []byte // a new end record for a cut snapshot
	if c.sealed && sealedAt < 0 {
		seal = AppendFrame(nil, snapshotEnd{records: uint64(info.Records), length: uint64(off), crc: crc32.Checksum(data[:off], castagnoli)}.body())
		info.Resealed = true
		info.KeptBytes += int64(len(seal))
	}
	if off == len(data) && seal == nil {
		return info, nil
	}
	backup, err := writeBackup(path, data)
	if err != nil {
		return info, fmt.Errorf("journal: salvage %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		err = f.Truncate(int64(off))
		if err == nil && seal != nil {
			_, err = f.WriteAt(seal, int64(off))
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return info, fmt.Errorf("journal: salvage %s (the original is in %s): %w", path, backup, err)
	}
	info.DroppedBytes = int64(len(data) - off)
	info.Backup = backup
	return info, nil
}

// errStop ends Salvage's scan at a bad end record.
var errStop = errors.New("journal: salvage stops here")

// setAside renames path to the first of path.corrupt, path.corrupt.1, ...
// that does not exist (the directory is locked: nobody else makes one), and
// fsyncs the directory.
func setAside(path string) (string, error) {
	for i := 0; ; i++ {
		name := backupName(path, i)
		if _, err := os.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				return "", err
			}
			continue
		}
		if err := os.Rename(path, name); err != nil {
			return "", err
		}
		return name, syncDir(filepath.Dir(path))
	}
}

func backupName(path string, i int) string {
	if i == 0 {
		return path + ".corrupt"
	}
	return fmt.Sprintf("%s.corrupt.%d", path, i)
}

// writeBackup writes data to the first of path.corrupt, path.corrupt.1,
// path.corrupt.2 ... that does not exist, and fsyncs it and its directory.
func writeBackup(path string, data []byte) (string, error) {
	for i := 0; ; i++ {
		name := backupName(path, i)
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = syncDir(filepath.Dir(name))
		}
		if err != nil {
			os.Remove(name)
			return "", err
		}
		return name, nil
	}
}
