//go:build !linux

package journal

// Owned reports whether a process holds dir's lock, and whether it could
// tell: only Linux lists the flocks held (/proc/locks), so elsewhere it
// cannot.
func Owned(dir string) (owned, known bool) { return false, false }
