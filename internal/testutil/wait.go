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
	took, done := wait(timeout, tick, ok)
	if !done {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return took
}

// Until is Eventually for a wait whose failure should say where it
// stopped: check returns nil once the condition holds, and until then an
// error that says what it saw (the state reached so far), which the
// failure ends with: "timed out after <timeout> waiting for <what>: <the
// last error>". Like Eventually, it returns how long the wait took, and
// check may call t.Fatal to end the wait early (a process that died).
func Until(t testing.TB, what string, timeout, tick time.Duration, check func() error) time.Duration {
	t.Helper()
	var last error
	took, done := wait(timeout, tick, func() bool {
		last = check()
		return last == nil
	})
	if !done {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, last)
	}
	return took
}

// wait calls ok at once and then at every tick until it returns true
// (done) or timeout has passed.
func wait(timeout, tick time.Duration, ok func() bool) (took time.Duration, done bool) {
	start := time.Now()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !ok() {
		if time.Since(start) > timeout {
			return time.Since(start), false
		}
		<-ticker.C
	}
	return time.Since(start), true
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

// Get returns what get returns (a status, a head: a read that the test goes
// on from), failing the test when it returns an error.
func Get[T any](t testing.TB, get func(context.Context) (T, error)) T {
	t.Helper()
	v, err := get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
