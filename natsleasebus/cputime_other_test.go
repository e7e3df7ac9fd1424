//go:build !unix

package natsleasebus_test

import "time"

// cpuTime is 0 where the process's CPU time is not read: no metric.
func cpuTime() time.Duration { return 0 }
