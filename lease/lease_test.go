package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/lease"
)

func setup(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, _, err := s.CreateBoundary(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	return s
}

// leaders records which holder leads and checks that two never lead at once.
type leaders struct {
	mu      sync.Mutex
	current string
	terms   []uint64
	overlap bool
}

func (l *leaders) lead(holder string) func(ctx context.Context, ls backend.Lease) error {
	return func(ctx context.Context, ls backend.Lease) error {
		l.mu.Lock()
		if l.current != "" {
			l.overlap = true
		}
		l.current = holder
		l.terms = append(l.terms, ls.Term)
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		l.current = ""
		l.mu.Unlock()
		return nil
	}
}

func (l *leaders) get() (string, []uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current, append([]uint64(nil), l.terms...), l.overlap
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOneLeaderAndHandOver_I6: of two runners one leads, the other waits
// and sees the holder; when the leader stops it releases the lease and the
// other takes over at once with a higher term.
func TestOneLeaderAndHandOver_I6(t *testing.T) {
	s := setup(t)
	var l leaders
	ttl := 5 * time.Second
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	var wg sync.WaitGroup
	var seenHolder atomic.Value
	wg.Add(2)
	go func() {
		defer wg.Done()
		(&lease.Runner{Store: s, Holder: "a", TTL: ttl}).Run(ctxA, "b", l.lead("a"), nil)
	}()
	waitFor(t, "a to lead", 5*time.Second, func() bool { c, _, _ := l.get(); return c == "a" })
	go func() {
		defer wg.Done()
		(&lease.Runner{Store: s, Holder: "b", TTL: ttl}).Run(ctxB, "b", l.lead("b"), func(h backend.Lease, err error) {
			seenHolder.Store(h.Holder)
		})
	}()
	waitFor(t, "b to see a as the holder", 5*time.Second, func() bool { h, _ := seenHolder.Load().(string); return h == "a" })
	start := time.Now()
	stopA()
	waitFor(t, "b to lead", 5*time.Second, func() bool { c, _, _ := l.get(); return c == "b" })
	if took := time.Since(start); took > ttl/2 {
		t.Fatalf("takeover took %s: the lease was not released on a clean stop", took)
	}
	stopB()
	wg.Wait()
	_, terms, overlap := l.get()
	if overlap {
		t.Fatal("two leaders at once")
	}
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Fatalf("terms %v: want two, growing", terms)
	}
}

// failingRenewals wraps a real store and refuses renewals on demand, as a
// store that lost the lease would.
type failingRenewals struct {
	*sqlite.Store
	fail atomic.Bool
}

func (f *failingRenewals) RenewLease(ctx context.Context, l backend.Lease, ttl time.Duration) (backend.Lease, error) {
	if f.fail.Load() {
		return backend.Lease{}, event.ErrLeaseLost
	}
	return f.Store.RenewLease(ctx, l, ttl)
}

// TestLeaderStepsDownWhenLeaseLost: a refused renewal ends the leader's
// context within one renewal period.
func TestLeaderStepsDownWhenLeaseLost(t *testing.T) {
	s := &failingRenewals{Store: setup(t)}
	var l leaders
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&lease.Runner{Store: s, Holder: "a", TTL: 300 * time.Millisecond}).Run(ctx, "b", l.lead("a"), nil)
	}()
	waitFor(t, "a to lead", 5*time.Second, func() bool { c, _, _ := l.get(); return c == "a" })
	s.fail.Store(true)
	waitFor(t, "a to step down", 2*time.Second, func() bool { c, _, _ := l.get(); return c == "" })
	s.fail.Store(false)
	cancel()
	<-done
}

// TestYieldNeverOrphansABoundary: a node that is told to yield on every
// attempt (a wrong count of nodes) still takes a free lease after two
// yielded attempts, so placement never leaves a boundary without a
// publisher (I4); the standby observer hears ErrYielded meanwhile.
func TestYieldNeverOrphansABoundary(t *testing.T) {
	s := setup(t)
	var asked, yieldedSeen atomic.Int64
	r := &lease.Runner{Store: s, Holder: "a", TTL: 300 * time.Millisecond,
		Yield: func() bool { asked.Add(1); return true }}
	var l leaders
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, "b", l.lead("a"), func(_ backend.Lease, err error) {
			if errors.Is(err, lease.ErrYielded) {
				yieldedSeen.Add(1)
			}
		})
	}()
	waitFor(t, "a leads despite yielding", 10*time.Second, func() bool { cur, _, _ := l.get(); return cur == "a" })
	cancel()
	<-done
	if asked.Load() != 2 || yieldedSeen.Load() != 2 {
		t.Fatalf("asked %d times, observer heard ErrYielded %d times; want 2 and 2", asked.Load(), yieldedSeen.Load())
	}
}

// TestStepDownReleasesTheLease: a leader told to step down after a renewal
// stops its leader work and releases the lease (its expiry is set to the
// epoch, so another node can take it at once instead of waiting for the
// TTL). While
// it is told to yield it then leaves the free lease alone for two attempts.
func TestStepDownReleasesTheLease(t *testing.T) {
	s := setup(t)
	var step atomic.Bool
	a := &lease.Runner{Store: s, Holder: "a", TTL: 600 * time.Millisecond,
		StepDown: func() bool { return step.Load() }, Yield: func() bool { return step.Load() }}
	var l leaders
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx, "b", l.lead("a"), nil) }()
	waitFor(t, "a leads", 10*time.Second, func() bool { cur, _, _ := l.get(); return cur == "a" })
	step.Store(true)
	// A release sets the expiry to the epoch; a lease left to run out
	// would expire about now instead.
	waitFor(t, "the lease released", 10*time.Second, func() bool {
		cur, err := s.LeaseHolder(context.Background(), "b")
		return err == nil && cur.Expires.Before(time.Unix(1, 0))
	})
	cancel()
	<-done
}

// TestStalledLeaderStepsDown: a runner whose leader work reports a stall
// gives the lease up after a renewal: the work's context ends with a
// SteppedDownError, the lease is released at once even though the work
// takes its time to return (a hanging call), another holder takes it, the
// standby observer hears the step-down, and the runner does not seek the
// lease again before the hold-off (two TTLs) ends.
func TestStalledLeaderStepsDown(t *testing.T) {
	s := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 300 * time.Millisecond
	var stalled atomic.Bool
	var causes, observed sync.Map
	returned, unblock := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	lead := func(lctx context.Context, l backend.Lease) error {
		<-lctx.Done()
		if runs.Add(1) > 1 {
			return nil // leading again after the hold-off
		}
		causes.Store("cause", context.Cause(lctx))
		// The work hangs on after its context ended (a call that does
		// not return); the lease must be free for others meanwhile.
		<-unblock
		close(returned)
		return nil
	}
	r := &lease.Runner{Store: s, Holder: "a", TTL: ttl, Stalled: func() string {
		if stalled.Load() {
			return "no progress"
		}
		return ""
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, "b", lead, func(_ backend.Lease, err error) {
			var sd *lease.SteppedDownError
			if errors.As(err, &sd) {
				observed.Store("sd", sd)
			}
		})
	}()
	waitFor(t, "a to lead", 5*time.Second, func() bool {
		cur, _ := s.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Expires.After(time.Now())
	})
	stalled.Store(true)
	// Released (a release expires the lease at the Unix epoch, unlike a
	// lease running out) while the work still hangs.
	waitFor(t, "the lease released", 5*time.Second, func() bool {
		cur, _ := s.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Expires.Unix() <= 0
	})
	select {
	case <-returned:
		t.Fatal("the work returned before the test let it")
	default:
	}
	c, _ := causes.Load("cause")
	var sd *lease.SteppedDownError
	if err, _ := c.(error); !errors.As(err, &sd) || sd.Why != "no progress" {
		t.Fatalf("the leader work's context ended with %v, want a SteppedDownError", c)
	}
	// Another holder takes the lease at once.
	other, err := s.AcquireLease(ctx, "b", "b-node", time.Minute)
	if err != nil {
		t.Fatalf("another holder could not take the released lease: %v", err)
	}
	close(unblock)
	<-returned
	waitFor(t, "the observer to hear the step-down", 5*time.Second, func() bool { _, ok := observed.Load("sd"); return ok })
	// The other holder releases it again at once: a ranks only after the hold-off.
	if err := s.ReleaseLease(ctx, other); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(sd.Until.Add(-ttl / 2)) {
		if cur, _ := s.LeaseHolder(ctx, "b"); cur.Holder == "a" && cur.Term > other.Term {
			t.Fatalf("a took the lease again %s before its hold-off ended", time.Until(sd.Until))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hold := sd.Until.Sub(sd.At); hold != 2*ttl {
		t.Fatalf("hold-off %s, want two TTLs (%s)", hold, 2*ttl)
	}
	stalled.Store(false)
	waitFor(t, "a to lead again after the hold-off", 10*time.Second, func() bool {
		cur, _ := s.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Term > other.Term
	})
	cancel()
	<-done
}
