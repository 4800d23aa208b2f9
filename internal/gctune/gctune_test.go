package gctune

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind.
func TestMain(m *testing.M) { testutil.Main(m) }

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, streams int64
		want          int
	}{
		{0, 0, 100},                  // nothing measured yet
		{50 * mib, 0, 100},           // no streams: the runtime's default
		{50 * mib, 45 * mib, 100},    // small heap: MinRoom is more than the default room
		{25 * mib, 17 * mib, 100},    // the api rows' node: the default, not MinRoom
		{400 * mib, 0, 100},          // no streams, large heap
		{400 * mib, 336 * mib, 16},   // streams: room 64 MiB of 400
		{400 * mib, 200 * mib, 50},   // room = the rest of the heap, 200 of 400
		{4096 * mib, 4090 * mib, 10}, // never below MinPercent
		{100 * mib, 500 * mib, 64},   // streams counted above live (replicas elsewhere): MinRoom
		{1000 * mib, 100 * mib, 90},  // mostly not streams
		{128 * mib, 128*mib - 1, 50}, // exactly MinRoom of 128
		{-1, 0, 100},                 // a metric not read
		{64*mib + 1, 64*mib + 1, 99}, // just above MinRoom, all streams
		{64 * mib, 64 * mib, 100},    // room = live: the default
		{640 * mib, 640 * mib, 10},   // room MinRoom of 640
		{10 * 1024 * mib, 0, 100},    // a big heap of other things
		{10 * 1024 * mib, 5 * 1024 * mib, 50},
	} {
		if got := Percent(c.live, c.streams); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.streams/mib, got, c.want)
		}
	}
}

// gcPercent reads the collector's percentage without changing it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// reset forgets a retirement, so that each test starts with a fresh tuner.
func reset(t *testing.T) {
	t.Cleanup(func() {
		tuner.mu.Lock()
		tuner.retired, tuner.sources = false, nil
		tuner.mu.Unlock()
		debug.SetGCPercent(BasePercent)
	})
}

// TestTunerKeepsStreamsOutOfTheRoom: with a registered source saying most
// of the live heap is streams, the tuner lowers the collector's percentage
// to leave MinRoom, and puts the default back after the last source is
// removed.
func TestTunerKeepsStreamsOutOfTheRoom(t *testing.T) {
	reset(t)
	held := make([]byte, 256<<20) // stands for the streams: live, noscan
	runtime.GC()
	streams := func() int64 { return int64(len(held)) }
	unregister := Register(streams, slog.New(slog.DiscardHandler))
	testutil.Eventually(t, "the percentage to drop", 10*time.Second, 50*time.Millisecond, func() bool {
		p := gcPercent()
		return p < 40 && p >= MinPercent
	})
	// 64 MiB of room over about 256 MiB + the test binary's heap.
	if p, want := gcPercent(), Percent(HeapLive(), streams()); p < want-3 || p > want+3 {
		t.Errorf("percentage %d, want about %d", p, want)
	}
	// A second server says the same bytes are its streams (the sources'
	// sum counts them twice, which only lowers the percentage further).
	second := Register(streams, slog.New(slog.DiscardHandler))
	unregister()
	unregister() // idempotent
	time.Sleep(2 * Interval)
	if p := gcPercent(); p >= 40 {
		t.Errorf("percentage %d after one of two sources left, want it still tuned", p)
	}
	second()
	if p := gcPercent(); p != BasePercent {
		t.Errorf("percentage %d after the last source left, want %d restored", p, BasePercent)
	}
	runtime.KeepAlive(held)
}

// TestTunerOffWithGOGC: GOGC in the environment is the operator's choice;
// the tuner does not start.
func TestTunerOffWithGOGC(t *testing.T) {
	reset(t)
	t.Setenv("GOGC", "100")
	unregister := Register(func() int64 { return 1 << 40 }, slog.New(slog.DiscardHandler))
	defer unregister()
	time.Sleep(2 * Interval)
	if p := gcPercent(); p != BasePercent {
		t.Errorf("percentage %d with GOGC set, want it untouched (%d)", p, BasePercent)
	}
}

// TestTunerRetiresWhenTheProgramTunes: a program that embeds orisun and sets
// the percentage itself, before or while a node runs, keeps it; the tuner
// says so once and stays out for the rest of the process.
func TestTunerRetiresWhenTheProgramTunes(t *testing.T) {
	for _, before := range []bool{false, true} {
		t.Run(map[bool]string{false: "while", true: "before"}[before], func(t *testing.T) {
			reset(t)
			var logs testutil.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			if before {
				debug.SetGCPercent(77)
			}
			unregister := Register(func() int64 { return 1 << 40 }, log)
			defer unregister()
			if !before {
				time.Sleep(Interval + Interval/2) // tuned once at least
				debug.SetGCPercent(77)
			}
			testutil.Eventually(t, "the tuner to retire", 10*time.Second, 50*time.Millisecond, func() bool {
				return strings.Contains(logs.String(), "orisun leaves it alone")
			})
			time.Sleep(2 * Interval)
			if p := gcPercent(); p != 77 {
				t.Errorf("percentage %d, want the program's 77 kept", p)
			}
			again := Register(func() int64 { return 1 << 40 }, log)
			again()
			if n := strings.Count(logs.String(), "orisun leaves it alone"); n != 1 {
				t.Errorf("%d retirement lines, want 1:\n%s", n, logs.String())
			}
		})
	}
}

// TestTunerHandovers: nodes starting while others stop (one's last source
// leaving as another registers) never leave the percentage tuned with no
// source, nor mistake the tuner's own setting for the program's (the
// review of issue 22 saw 2 of 20 handovers end at 24%, retired).
func TestTunerHandovers(t *testing.T) {
	reset(t)
	held := make([]byte, 256<<20)
	streams := func() int64 { return int64(len(held)) }
	var logs testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	interval = 2 * time.Millisecond // tuned again between handovers
	defer func() { interval = Interval }()
	unregister := Register(streams, log)
	testutil.Eventually(t, "the percentage to drop", 10*time.Second, time.Millisecond, func() bool { return gcPercent() < 40 })
	for i := range 200 {
		done := make(chan func())
		// The new node registers at some point of the old one's stop.
		delay := time.Duration(i%10) * 5 * time.Microsecond
		go func() { time.Sleep(delay); done <- Register(streams, log) }()
		unregister()
		unregister = <-done
		time.Sleep(5 * time.Millisecond)
	}
	if strings.Contains(logs.String(), "leaves it alone") {
		t.Fatalf("the tuner retired on its own setting:\n%s", logs.String())
	}
	unregister()
	if p, n := gcPercent(), Sources(); p != BasePercent || n != 0 {
		t.Errorf("after the last node: percentage %d, %d sources; want %d, 0", p, n, BasePercent)
	}
	runtime.KeepAlive(held)
}

// TestTunerStopKeepsTheProgramsLastSetting: a percentage the program sets
// between the tuner's last tick and its stop is the program's: stopping
// does not overwrite it.
func TestTunerStopKeepsTheProgramsLastSetting(t *testing.T) {
	reset(t)
	unregister := Register(func() int64 { return 0 }, slog.New(slog.DiscardHandler))
	time.Sleep(Interval + Interval/2)
	debug.SetGCPercent(55)
	unregister() // within the second after the program's change: no tick saw it
	if p := gcPercent(); p != 55 {
		t.Errorf("percentage %d after stop, want the program's 55", p)
	}
}
