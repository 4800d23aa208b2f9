package testutil

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLeakCheck is the negative control of the leak checks: a goroutine
// left running is found, with its stack, and nothing once it ended.
func TestLeakCheck(t *testing.T) {
	before := map[uint64]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	stop := make(chan struct{})
	go leakyWorker(stop)
	leaked := waitForLeaks(before, 100*time.Millisecond, nil)
	if len(leaked) != 1 || !strings.Contains(leaked[0].stack, "testutil.leakyWorker") {
		t.Fatalf("found %d leaked goroutine(s):\n%s", len(leaked), joinStacks(leaked))
	}
	allowed := []Allow{{Func: "github.com/orisun-io/orisun/internal/testutil.leakyWorker", Why: "the test's"}}
	if leaked := waitForLeaks(before, 100*time.Millisecond, allowed); len(leaked) != 0 {
		t.Fatalf("an allowed goroutine is found:\n%s", joinStacks(leaked))
	}
	close(stop)
	if leaked := waitForLeaks(before, 5*time.Second, nil); len(leaked) != 0 {
		t.Fatalf("a goroutine that ended is still found:\n%s", joinStacks(leaked))
	}

	// NoLeaks fails the test whose goroutine outlives it.
	stop = make(chan struct{})
	defer close(stop)
	msg := failing(t, func(tb testing.TB) {
		ft := &cleanupT{TB: tb}
		NoLeaks(ft)
		go leakyWorker(stop)
		ft.cleanup()
	})
	if !strings.Contains(msg, "1 goroutine(s) started by the test still run") || !strings.Contains(msg, "leakyWorker") {
		t.Fatalf("NoLeaks failed with %q", msg)
	}
	msg = failing(t, func(tb testing.TB) {
		ft := &cleanupT{TB: tb}
		NoLeaks(ft)
		done := make(chan struct{})
		go func() { close(done) }()
		<-done
		ft.cleanup()
	})
	if msg != "" {
		t.Fatalf("NoLeaks failed a test that left nothing running: %q", msg)
	}
}

func leakyWorker(stop chan struct{}) { <-stop }

// cleanupT runs the cleanups of a fake test when told.
type cleanupT struct {
	testing.TB
	fns []func()
}

func (c *cleanupT) Cleanup(fn func()) { c.fns = append(c.fns, fn) }

func (c *cleanupT) cleanup() {
	for _, fn := range slices.Backward(c.fns) {
		fn()
	}
}

// TestBackground: the runtime's goroutines and those of the allowlist are
// not leaks; anything else is.
func TestBackground(t *testing.T) {
	for stack, want := range map[string]bool{
		"goroutine 5 [syscall]:\nos/signal.signal_recv()\n\t/go/src/runtime/sigqueue.go:152 +0x29\nos/signal.loop()\n\t/go/src/os/signal/signal_unix.go:23 +0x13\ncreated by os/signal.Notify.func1.1 in goroutine 1": true,
		"goroutine 2 [force gc (idle)]:\nruntime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)\n\t/go/src/runtime/proc.go:435 +0xce\nruntime.forcegchelper()\n\t/go/src/runtime/proc.go:348 +0xb3":                             true,
		"goroutine 9 [chan receive]:\ngithub.com/orisun-io/orisun/publisher.(*Publisher).run(0xc000)\n\t/x/publisher.go:10 +0x1\ncreated by os/signal.Notify in goroutine 1":                                          false,
		"goroutine 9 [IO wait]:\nnet/http.(*persistConn).readLoop(0xc000)\n\t/go/src/net/http/transport.go:2300 +0x1":                                                                                                 false,
	} {
		if got := isBackground(stack, nil); got != want {
			t.Errorf("isBackground = %v, want %v:\n%s", got, want, stack)
		}
	}
}
