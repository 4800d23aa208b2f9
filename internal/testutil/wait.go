package testutil

import (
	"context"
	"testing"
	"time"
)

// Eventually calls ok at once and then at every tick until it returns
// true, and returns how long that took. When ok is still false after
// timeout, it fails the test: "timed out after <timeout> waiting for
// <what>". Call it from the test's goroutine (it may call t.FailNow).
//
// The tick is the caller's: most tests poll every 10 to 50 ms, and a test
// that must act inside a short window (stop a process in the middle of a
// batch) polls faster.
func Eventually(t testing.TB, what string, timeout, tick time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !ok() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-ticker.C
	}
	return time.Since(start)
}

// Every calls fn in a goroutine of the test, again and again, interval
// after each call returned, until halt: a background load or monitor.
// halt cancels ctx (for fn to watch in a long call) and waits for the
// goroutine to end; it may be called more than once, and the test's
// cleanup calls it, so that the goroutine never outlives the test.
func Every(t testing.TB, interval time.Duration, fn func(ctx context.Context)) (halt func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			fn(ctx)
		}
	}()
	halt = func() {
		cancel()
		<-done
	}
	t.Cleanup(halt)
	return halt
}
