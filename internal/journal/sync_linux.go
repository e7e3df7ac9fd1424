package journal

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data, and the metadata needed to read it back (its
// size), to the disk.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
