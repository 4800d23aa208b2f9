//go:build !unix

package backendtest

import "time"

// cpuTime is not measured here (see cpu_unix.go).
func cpuTime() time.Duration { return 0 }
