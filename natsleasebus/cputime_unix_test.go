//go:build unix

package natsleasebus_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system:
// the server's and the client's alike, as they share the machine's cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
