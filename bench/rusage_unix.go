//go:build unix

package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime returns this process's user+system CPU time, and its peak
// resident set in bytes (getrusage).
func cpuTime() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	maxrss := int64(ru.Maxrss)
	if runtime.GOOS == "linux" {
		maxrss *= 1024 // kilobytes on Linux, bytes on macOS
	}
	return cpu, maxrss
}

// ResidentBytes returns the current resident set in bytes (Linux: /proc/self/statm;
// 0 elsewhere).
func ResidentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// loadAvg returns the 1, 5 and 15 minute load averages (Linux; nil
// elsewhere).
func loadAvg() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	out := make([]float64, 3)
	for i := range out {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// machineBusy returns the CPU time every process on the machine has used
// since boot, in seconds (Linux: /proc/stat's first line, user + nice +
// system + irq + softirq + steal, in USER_HZ ticks of 1/100 s), and false
// where it cannot be read.
func machineBusy() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var ticks uint64
	// user nice system idle iowait irq softirq steal: idle and iowait are
	// not work.
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += v
	}
	return float64(ticks) / 100, true
}

// threadWaits reads, for every thread in /proc (this PID namespace's),
// the time it has run and the time it has spent runnable but waiting for
// a CPU since it started (Linux: the first two fields of
// /proc/<pid>/task/<tid>/schedstat, in nanoseconds), keyed by thread id;
// false where this process's own threads cannot be read or show no run
// time (no /proc, a kernel without schedstat, or one whose accounting is
// off). Threads that cannot be read are left out.
func threadWaits() (map[int]threadSched, bool) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	self := strconv.Itoa(os.Getpid())
	threads := make(map[int]threadSched, 256)
	var selfRun uint64
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		dir := "/proc/" + p.Name() + "/task/"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(dir + t.Name() + "/schedstat")
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) < 2 {
				continue
			}
			run, err1 := strconv.ParseUint(f[0], 10, 64)
			wait, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			threads[tid] = threadSched{run: run, wait: wait}
			if p.Name() == self {
				selfRun += run
			}
		}
	}
	return threads, selfRun > 0
}
