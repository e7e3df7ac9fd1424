package journal

import (
	"testing"
)

func TestOwned(t *testing.T) {
	dir := t.TempDir()
	if owned, known := Owned(dir); owned || !known {
		t.Fatalf("a directory never opened: owned %v, known %v", owned, known)
	}
	lock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if owned, known := Owned(dir); !owned || !known {
		t.Fatalf("a locked directory: owned %v, known %v", owned, known)
	}
	lock.Close()
	if owned, known := Owned(dir); owned || !known {
		t.Fatalf("a directory let go: owned %v, known %v", owned, known)
	}
}
