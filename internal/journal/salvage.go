package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SalvageInfo describes what Salvage kept and cut.
type SalvageInfo struct {
	Records      int    // records kept: whole, checksummed and accepted by replay
	KeptBytes    int64  // the live segment's size after Salvage
	DroppedBytes int64  // bytes cut off its end (0: nothing was changed)
	Backup       string // the copy of the original segment ("" if nothing was cut)
}

// Salvage repairs a journal that Open refuses, as a separate, explicit step:
// it locks dir (ErrLocked if an open journal holds it), finds the live
// (newest) segment as Open does, and keeps its longest prefix of whole,
// checksummed frames that replay also accepts, stopping at the first bad
// frame or the first record replay refuses, whatever follows. If that is
// less than the whole segment, it first copies the original segment, byte
// for byte, to seg-NNNNNNNN.log.corrupt beside it (or .corrupt.1, .corrupt.2
// and so on if that exists), fsyncs the copy and the directory, and only
// then cuts the segment to the kept prefix and fsyncs it. Everything after
// the cut is lost to the journal (the backup keeps it). A segment with
// nothing to cut, or no segment, is left alone: DroppedBytes is 0 and
// Backup "". After Salvage, Open succeeds (with a replay that accepts what
// replay accepted). A nil replay accepts every record.
func Salvage(dir string, replay func(body []byte) error) (SalvageInfo, error) {
	lock, err := lockDir(dir)
	if errors.Is(err, ErrLocked) {
		return SalvageInfo{}, err
	}
	if err != nil {
		return SalvageInfo{}, fmt.Errorf("journal: salvage: %w", err)
	}
	defer lock.Close()
	segs, _, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		if err != nil {
			err = fmt.Errorf("journal: salvage: %w", err)
		}
		return SalvageInfo{}, err
	}
	path := filepath.Join(dir, segFileName(segs[len(segs)-1]))
	data, err := os.ReadFile(path)
	if err != nil {
		return SalvageInfo{}, fmt.Errorf("journal: salvage: %w", err)
	}
	var info SalvageInfo
	off, _ := scanFrames(data, func(body []byte) error {
		if replay != nil {
			if err := replay(body); err != nil {
				return err // the kept prefix ends before this record
			}
		}
		info.Records++
		return nil
	})
	info.KeptBytes = int64(off)
	if off == len(data) {
		return info, nil
	}
	backup, err := writeBackup(path, data)
	if err != nil {
		return SalvageInfo{}, fmt.Errorf("journal: salvage %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		err = f.Truncate(int64(off))
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
		return SalvageInfo{}, fmt.Errorf("journal: salvage %s (the original is in %s): %w", path, backup, err)
	}
	info.DroppedBytes = int64(len(data) - off)
	info.Backup = backup
	return info, nil
}

// writeBackup writes data to the first of path.corrupt, path.corrupt.1,
// path.corrupt.2 ... that does not exist, and fsyncs it and its directory.
func writeBackup(path string, data []byte) (string, error) {
	for i := 0; ; i++ {
		name := path + ".corrupt"
		if i > 0 {
			name += fmt.Sprintf(".%d", i)
		}
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
