package testutil

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	calls := 0
	took := Eventually(t, "the third call", 5*time.Second, time.Millisecond, func() bool { calls++; return calls == 3 })
	if calls != 3 || took <= 0 || took > 5*time.Second {
		t.Fatalf("returned after %d calls, %s", calls, took)
	}
	msg := failing(t, func(tb testing.TB) {
		Eventually(tb, "never", 50*time.Millisecond, 10*time.Millisecond, func() bool { return false })
		tb.Errorf("Eventually returned though the condition never held")
	})
	if msg != "timed out after 50ms waiting for never" {
		t.Fatalf("failed with %q", msg)
	}
}

// TestUntil: the wait ends once check returns nil; a timeout's failure
// names what it waited for and ends with check's last error.
func TestUntil(t *testing.T) {
	calls := 0
	Until(t, "the third call", 5*time.Second, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("returned after %d calls, want 3", calls)
	}
	calls = 0
	msg := failing(t, func(tb testing.TB) {
		Until(tb, "never", 50*time.Millisecond, 10*time.Millisecond, func() error { calls++; return fmt.Errorf("at %d", calls) })
		tb.Errorf("Until returned though check never returned nil")
	})
	if want := fmt.Sprintf("timed out after 50ms waiting for never: at %d", calls); msg != want {
		t.Fatalf("failed with %q, want %q", msg, want)
	}
}

// TestEvery: fn runs until halt, which waits for it and may be called
// again; the test's cleanup halts a loop the test left running.
func TestEvery(t *testing.T) {
	var calls atomic.Int64
	stopsAt := func(what string) {
		t.Helper()
		n := calls.Load()
		time.Sleep(20 * time.Millisecond)
		if calls.Load() != n {
			t.Fatalf("fn was called after %s", what)
		}
	}
	run := func(t *testing.T) func() {
		halt := Every(t, time.Millisecond, func(context.Context) { calls.Add(1) })
		n := calls.Load()
		Eventually(t, "the loop to run", 10*time.Second, time.Millisecond, func() bool { return calls.Load() > n+3 })
		return halt
	}
	t.Run("left running", func(t *testing.T) { run(t) })
	stopsAt("the test that left it running ended")
	halt := run(t)
	halt()
	stopsAt("halt returned")
	halt()

	// halt cancels the context of a call in progress.
	var cancelled atomic.Bool
	entered := make(chan struct{})
	halt = Every(t, time.Millisecond, func(ctx context.Context) {
		select {
		case <-entered:
		default:
			close(entered)
		}
		<-ctx.Done()
		cancelled.Store(true)
	})
	<-entered
	halt()
	if !cancelled.Load() {
		t.Fatal("halt returned before the call in progress saw its context end")
	}
}

// TestGet: the value of a read that succeeds; a read that fails fails the
// test with its error.
func TestGet(t *testing.T) {
	if got := Get(t, func(context.Context) (int, error) { return 7, nil }); got != 7 {
		t.Fatalf("Get = %d, want 7", got)
	}
	if got := failing(t, func(tb testing.TB) {
		Get(tb, func(context.Context) (int, error) { return 0, errors.New("no status") })
	}); got != "no status" {
		t.Fatalf("Get of a failing read failed with %q, want its error", got)
	}
}
