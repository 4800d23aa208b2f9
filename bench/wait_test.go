package bench

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMeterCountsWaitsForACPU: a row over which more threads want to run
// than the machine has CPUs reports the time they waited for one
// (machine_wait_s), and no more than their wall time allows.
func TestMeterCountsWaitsForACPU(t *testing.T) {
	if _, ok := threadWaits(); !ok {
		testutil.Unavailable(t, "no /proc/<pid>/task/<tid>/schedstat on this machine")
	}
	cpus := runtime.NumCPU()
	spinners := 2*cpus + 1
	const spin = 300 * time.Millisecond
	// As many Go threads as spinners may run at once: the waiting is then
	// the kernel's, which the row measures, not the Go scheduler's.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(spinners + 1))
	m := startMeter()
	var wg sync.WaitGroup
	for range spinners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A thread of its own, so that the kernel sees more runnable
			// threads than CPUs (Go runs at most GOMAXPROCS goroutines
			// at once on its own).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for end := time.Now().Add(spin); time.Now().Before(end); {
			}
		}()
	}
	wg.Wait()
	row := m.row("test", "spin", 1000, 1)
	// Each spinner is runnable for the whole spin, and at most cpus of
	// them run at once: together they waited about (spinners-cpus) × spin.
	// Half of that is the floor (the spinners start and end a little
	// apart); other work on the machine only adds to it.
	if min := float64(spinners-cpus) * spin.Seconds() / 2; row.MachineWaitSeconds < min {
		t.Fatalf("%d threads spun for %s on %d CPUs, and the row says they waited %.3f s for a CPU, less than %.3f s", spinners, spin, cpus, row.MachineWaitSeconds, min)
	}
	if got, want := row.MachineWaitUsPerEvent, row.MachineWaitSeconds/1000*1e6; got != want {
		t.Errorf("machine_wait_us_per_event %v, want machine_wait_s over the events in µs, %v", got, want)
	}
	// Every thread on the machine waited at most the row's wall time, and
	// the machine has a few hundred at most.
	if max := row.Seconds * 1000; row.MachineWaitSeconds > max {
		t.Errorf("waited %v s in a row of %v s", row.MachineWaitSeconds, row.Seconds)
	}
	t.Logf("%d spinning threads on %d CPUs for %s: waited %.3f s in all", spinners, cpus, spin, row.MachineWaitSeconds)
}

// TestWaitedBetween: a thread's wait counts from its value at the start;
// a thread that started since counts whole, as does one that took the id
// of a thread that ended (its counts went down); a thread that ended is
// not counted.
func TestWaitedBetween(t *testing.T) {
	start := map[int]threadSched{
		1: {run: 100, wait: 10}, // runs on
		2: {run: 500, wait: 70}, // ends
		3: {run: 900, wait: 90}, // ends; a new thread takes its id
		4: {run: 50, wait: 40},  // idle: no more waits
	}
	end := map[int]threadSched{
		1: {run: 300, wait: 25}, // +15
		3: {run: 20, wait: 6},   // a new thread 3: 6 whole
		4: {run: 50, wait: 40},  // +0
		5: {run: 80, wait: 30},  // started since: 30 whole
	}
	if got, want := waitedBetween(start, end), uint64(15+6+0+30); got != want {
		t.Errorf("waitedBetween = %d, want %d", got, want)
	}
	if got := waitedBetween(nil, end); got != 25+6+40+30 {
		t.Errorf("waitedBetween(nil, end) = %d, want every thread whole, %d", got, 25+6+40+30)
	}
	if got := waitedBetween(start, start); got != 0 {
		t.Errorf("waitedBetween(start, start) = %d, want 0", got)
	}
}
