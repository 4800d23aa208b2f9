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

// threadWaits returns, for every thread on the machine, the time it has
// spent runnable but waiting for a CPU since it started, in nanoseconds
// (Linux: the second field of /proc/<pid>/task/<tid>/schedstat), keyed by
// thread id; false where this process's own threads cannot be read (no
// /proc, or a kernel without schedstat). Threads that cannot be read are
// left out.
func threadWaits() (map[int]uint64, bool) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	self := strconv.Itoa(os.Getpid())
	waits := make(map[int]uint64, 256)
	selfRead := false
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
			b, err := os.ReadFile(dir + t.Name() + "/schedstat")
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			tid, err1 := strconv.Atoi(t.Name())
			if len(f) < 2 || err1 != nil {
				continue
			}
			ns, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				continue
			}
			waits[tid] = ns
			if p.Name() == self {
				selfRead = true
			}
		}
	}
	return waits, selfRead
}

// waitedSince is the time the machine's threads spent waiting for a CPU
// since start (threadWaits), in seconds: the threads alive now, each less
// what it had waited at start (a thread that started since counts whole;
// one that ended since is not counted).
func waitedSince(start map[int]uint64) (float64, bool) {
	now, ok := threadWaits()
	if !ok {
		return 0, false
	}
	var ns uint64
	for tid, w := range now {
		if s, ok := start[tid]; ok && s <= w {
			ns += w - s
		} else if !ok {
			ns += w
		}
	}
	return float64(ns) / 1e9, true
}
