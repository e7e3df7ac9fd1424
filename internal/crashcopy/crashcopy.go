// Package crashcopy is a test helper: it copies a durable broker's
// directory as a crash would leave it.
package crashcopy

import (
	"os"
	"path/filepath"
	"testing"
)

// Of copies dir into a new temporary directory as a crash would leave it:
// whatever the calls so far wrote to the files (the original still open,
// its lock not copied). Every call of a durable broker returns after its
// records are written (in both sync modes), so the copy holds them all.
func Of(tb testing.TB, dir string) string {
	tb.Helper()
	to := tb.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return to
}
