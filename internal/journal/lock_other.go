//go:build !unix

package journal

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir: the durable mode needs flock(2), which this system lacks.
func lockDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("journal: %s: durable mode is not supported on %s", dir, runtime.GOOS)
}
