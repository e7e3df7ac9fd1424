//go:build !linux

package journal

import "os"

// fdatasync is fsync where fdatasync(2) is not available.
func fdatasync(f *os.File) error { return f.Sync() }
