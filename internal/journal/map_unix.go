//go:build unix

package journal

import (
	"os"
	"syscall"
)

// mapSegment maps the segment file at path into memory, read-only, for
// Open's replay: the scan reads the page cache where it is, where a copy
// on the heap would first fault in and fill as many fresh pages (for a
// segment of 280 MB, 0.7 s of a 2.8 s Open, and its first checksum pass
// from cold memory 0.3 s more). release unmaps it; nothing may read data
// after that. A file that cannot be mapped is read instead.
//
// While it is mapped, a read of a page that another process cut off the
// file would fault: the directory lock keeps every leasebus process from
// doing that, and Open holds it.
func mapSegment(path string) (data []byte, release func(), err error) {
	if err := regular(path); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size > 0 && size == int64(int(size)) {
		if data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED); err == nil {
			return data, func() { syscall.Munmap(data) }, nil
		}
	}
	data, err = readSegment(path)
	return data, func() {}, err
}
