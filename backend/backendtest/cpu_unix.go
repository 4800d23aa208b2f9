//go:build unix

package backendtest

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used so far,
// 0 where it cannot be read. A benchmark that reports it per operation
// beside the wall time is less at the mercy of other processes on a shared
// machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
