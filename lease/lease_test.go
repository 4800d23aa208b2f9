package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/lease"
)

func setup(t *testing.T) *sqlite.Store {
	t.Helper()
	s := storetest.SQLite(t, sqlite.Config{Dir: t.TempDir()})
	if _, _, err := s.CreateBoundary(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs r for boundary b in a goroutine until stop, which cancels the
// run and waits for it to return; the test's cleanup stops it too. (A test
// whose leader work hangs on after its context ended runs r itself: a stop
// would wait for that work.)
func run(t *testing.T, r *lease.Runner, lead func(context.Context, backend.Lease) error, standby lease.Observer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, "b", lead, standby) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// released reports whether holder has released the lease of b: a release
// sets the expiry to the Unix epoch, unlike a lease left to run out.
func released(s backend.Store, holder string) func() bool {
	return func() bool {
		cur, err := s.LeaseHolder(context.Background(), "b")
		return err == nil && cur.Holder == holder && cur.Expires.Unix() <= 0
	}
}

// stalling returns a runner for holder a whose leader work reports a stall
// ("no progress") while stalled is set; asked is set once the runner asked
// while it was.
func stalling(s backend.Store, ttl time.Duration) (r *lease.Runner, stalled, asked *atomic.Bool) {
	stalled, asked = new(atomic.Bool), new(atomic.Bool)
	r = &lease.Runner{Store: s, Holder: "a", TTL: ttl, Stalled: func() string {
		if !stalled.Load() {
			return ""
		}
		asked.Store(true)
		return "no progress"
	}}
	return r, stalled, asked
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

// TestOneLeaderAndHandOver_I6: of two runners one leads, the other waits
// and sees the holder; when the leader stops it releases the lease and the
// other takes over at once with a higher term.
func TestOneLeaderAndHandOver_I6(t *testing.T) {
	s := setup(t)
	var l leaders
	ttl := 5 * time.Second
	var seenHolder atomic.Value
	stopA := run(t, &lease.Runner{Store: s, Holder: "a", TTL: ttl}, l.lead("a"), nil)
	testutil.Eventually(t, "a to lead", 5*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "a" })
	stopB := run(t, &lease.Runner{Store: s, Holder: "b", TTL: ttl}, l.lead("b"), func(h backend.Lease, err error) {
		seenHolder.Store(h.Holder)
	})
	testutil.Eventually(t, "b to see a as the holder", 5*time.Second, 5*time.Millisecond, func() bool { h, _ := seenHolder.Load().(string); return h == "a" })
	start := time.Now()
	stopA()
	testutil.Eventually(t, "b to lead", 5*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "b" })
	if took := time.Since(start); took > ttl/2 {
		t.Fatalf("takeover took %s: the lease was not released on a clean stop", took)
	}
	stopB()
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
	stop := run(t, &lease.Runner{Store: s, Holder: "a", TTL: 300 * time.Millisecond}, l.lead("a"), nil)
	testutil.Eventually(t, "a to lead", 5*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "a" })
	s.fail.Store(true)
	testutil.Eventually(t, "a to step down", 2*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "" })
	s.fail.Store(false)
	stop()
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
	stop := run(t, r, l.lead("a"), func(_ backend.Lease, err error) {
		if errors.Is(err, lease.ErrYielded) {
			yieldedSeen.Add(1)
		}
	})
	testutil.Eventually(t, "a leads despite yielding", 10*time.Second, 5*time.Millisecond, func() bool { cur, _, _ := l.get(); return cur == "a" })
	stop()
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
	stop := run(t, a, l.lead("a"), nil)
	testutil.Eventually(t, "a leads", 10*time.Second, 5*time.Millisecond, func() bool { cur, _, _ := l.get(); return cur == "a" })
	step.Store(true)
	// Released, not left to run out (which would expire about now).
	testutil.Eventually(t, "the lease released", 10*time.Second, 5*time.Millisecond, released(s, "a"))
	stop()
}

// TestStalledLeaderStepsDown: a runner whose leader work reports a stall
// gives the lease up after a renewal: the work's context ends with a
// SteppedDownError, the lease is released at once even though the work
// takes its time to return (a hanging call), another holder takes it, the
// standby observer hears the step-down, and the runner does not seek the
// lease again during the hold-off (two TTLs) unless it has been free for a
// TTL.
func TestStalledLeaderStepsDown(t *testing.T) {
	s := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 300 * time.Millisecond
	r, stalled, _ := stalling(s, ttl)
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
	testutil.Eventually(t, "a to lead", 5*time.Second, 5*time.Millisecond, func() bool {
		cur, _ := s.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Expires.After(time.Now())
	})
	stalled.Store(true)
	// Released while the work still hangs.
	testutil.Eventually(t, "the lease released", 5*time.Second, 5*time.Millisecond, released(s, "a"))
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
	other, err := s.AcquireLease(ctx, "b", "b-node", nil, time.Minute)
	if err != nil {
		t.Fatalf("another holder could not take the released lease: %v", err)
	}
	close(unblock)
	<-returned
	testutil.Eventually(t, "the observer to hear the step-down", 5*time.Second, 5*time.Millisecond, func() bool { _, ok := observed.Load("sd"); return ok })
	if hold := sd.Until.Sub(sd.At); hold != 2*ttl {
		t.Fatalf("hold-off %s, want two TTLs (%s)", hold, 2*ttl)
	}
	// The other holder releases it again: a, holding off, does not take
	// it at once; only once it has been free for a TTL (nobody else
	// wants it), which may end the hold-off early.
	stalled.Store(false)
	if err := s.ReleaseLease(ctx, other); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for time.Since(freed) < ttl/2 && time.Now().Before(sd.Until) {
		if cur, _ := s.LeaseHolder(ctx, "b"); cur.Holder == "a" && cur.Term > other.Term {
			t.Fatalf("a took the lease again %s after it was freed, during its hold-off", time.Since(freed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	testutil.Eventually(t, "a to lead again", 10*time.Second, 5*time.Millisecond, func() bool {
		cur, _ := s.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Term > other.Term
	})
	cancel()
	<-done
}

// TestStepDownWaitsForFencedSection_I6: a stalled leader steps down, but
// while its leader work is inside a fenced section (lease.EnterFence: the
// publisher's delete, purge or recreate of the stream) the lease is not
// released: another node taking it then could have its new stream erased
// by the old leader's delete. No new fenced section may start once the
// step-down began, and the lease is released as soon as the section ends,
// even though the work itself still hangs.
func TestStepDownWaitsForFencedSection_I6(t *testing.T) {
	s := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 1500 * time.Millisecond
	r, stalled, asked := stalling(s, ttl)
	inside, leave, returned, unblock := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var lateErr atomic.Value
	lead := func(lctx context.Context, l backend.Lease) error {
		select {
		case <-inside: // leading again after the hold-off
			<-lctx.Done()
			return nil
		default:
		}
		end, err := lease.EnterFence(lctx)
		if err != nil {
			t.Errorf("EnterFence while leading: %v", err)
			return nil
		}
		// As the publisher's fence does: renew the lease for the
		// operation (its deadline is the renewed expiry).
		if _, err := s.RenewLease(lctx, l, ttl); err != nil {
			t.Errorf("renewal in the fence: %v", err)
		}
		close(inside)
		<-leave
		end()
		<-lctx.Done()
		_, err = lease.EnterFence(lctx)
		lateErr.Store(errOrNil{err})
		<-unblock // the work hangs on after its section ended
		close(returned)
		return nil
	}
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, "b", lead, nil) }()
	<-inside
	stalled.Store(true)
	testutil.Eventually(t, "the runner to decide to step down", 5*time.Second, 5*time.Millisecond, asked.Load)
	// The section is in flight, within its deadline (the renewed expiry,
	// a TTL after the last renewal): the lease stays with a, and nobody
	// else can take it.
	for end := time.Now().Add(ttl / 5); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		cur, err := s.LeaseHolder(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if cur.Holder != "a" || cur.Expires.Unix() <= 0 {
			t.Fatalf("lease %+v released while a fenced section was in flight", cur)
		}
	}
	if _, err := s.AcquireLease(ctx, "b", "b-node", nil, time.Minute); !errors.Is(err, event.ErrLeaseHeld) {
		t.Fatalf("another holder acquiring during the fenced section: %v, want ErrLeaseHeld", err)
	}
	close(leave)
	testutil.Eventually(t, "the lease released once the section ended", 5*time.Second, 5*time.Millisecond, released(s, "a"))
	select {
	case <-returned:
		t.Fatal("the work returned before the test let it")
	default:
	}
	testutil.Eventually(t, "the work to try a section after the step-down", 5*time.Second, 5*time.Millisecond, func() bool { return lateErr.Load() != nil })
	if err := lateErr.Load().(errOrNil).err; !errors.Is(err, lease.ErrSteppingDown) {
		t.Fatalf("EnterFence after the step-down began: %v, want ErrSteppingDown", err)
	}
	close(unblock)
	cancel()
	<-done
}

type errOrNil struct{ err error }

// stallMonitor records the leader work of several runners sharing one
// lease and measures the longest time nobody led.
type stallMonitor struct {
	mu       sync.Mutex
	leading  int
	freeAt   time.Time // when the last leader stopped (zero while one leads)
	longest  time.Duration
	overlap  bool
	handover map[string]int // leads started, per holder
}

func (m *stallMonitor) lead(holder string, since *atomic.Int64) func(ctx context.Context, l backend.Lease) error {
	return func(ctx context.Context, l backend.Lease) error {
		m.mu.Lock()
		if m.leading > 0 {
			m.overlap = true
		}
		m.leading++
		if !m.freeAt.IsZero() {
			m.longest = max(m.longest, time.Since(m.freeAt))
		}
		m.freeAt = time.Time{}
		m.handover[holder]++
		m.mu.Unlock()
		since.Store(time.Now().UnixNano())
		<-ctx.Done()
		since.Store(0)
		m.mu.Lock()
		m.leading--
		if m.leading == 0 {
			m.freeAt = time.Now()
		}
		m.mu.Unlock()
		return nil
	}
}

// TestSharedStallKeepsALeader_I4: three runners share a lease; a runner
// whose leader work has led for half a TTL reports a stall. When the stall
// hits every node (the stream offline, no JetStream quorum) they take
// turns stepping down; the hold-offs must not all run at once and leave
// the boundary with no leader for long: a node ends its hold-off once the
// lease has been free for a TTL, and its hold-off grows only when another
// node took the lease. The longest time with nobody leading stays within
// a few TTLs (before the fix it grew to 8–9 TTLs). When only one node is
// stalled, the lease still goes to another node, which keeps it.
func TestSharedStallKeepsALeader_I4(t *testing.T) {
	ttl := 300 * time.Millisecond
	run := func(t *testing.T, stalledHolders map[string]bool, d time.Duration) *stallMonitor {
		s := setup(t)
		m := &stallMonitor{handover: map[string]int{}}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, h := range []string{"a", "b", "c"} {
			since := &atomic.Int64{}
			r := &lease.Runner{Store: s, Holder: h, TTL: ttl, Stalled: func() string {
				if v := since.Load(); stalledHolders[h] && v != 0 && time.Since(time.Unix(0, v)) > ttl/2 {
					return "no progress"
				}
				return ""
			}}
			wg.Add(1)
			go func() { defer wg.Done(); r.Run(ctx, "b", m.lead(h, since), nil) }()
			if i == 0 {
				testutil.Eventually(t, "a to lead first", 5*time.Second, 5*time.Millisecond, func() bool { return since.Load() != 0 })
			}
		}
		time.Sleep(d)
		cancel()
		wg.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.overlap {
			t.Fatal("two runners led at once")
		}
		return m
	}
	t.Run("every node stalled", func(t *testing.T) {
		m := run(t, map[string]bool{"a": true, "b": true, "c": true}, 40*ttl)
		t.Logf("longest time without a leader: %s (%.1f TTLs); leads per node %v", m.longest, float64(m.longest)/float64(ttl), m.handover)
		if m.longest > 3*ttl {
			t.Fatalf("no leader for %s (%.1f TTLs), want at most 3 TTLs", m.longest, float64(m.longest)/float64(ttl))
		}
	})
	t.Run("one node stalled", func(t *testing.T) {
		m := run(t, map[string]bool{"a": true}, 20*ttl)
		t.Logf("longest time without a leader: %s; leads per node %v", m.longest, m.handover)
		if m.handover["a"] != 1 || m.handover["b"]+m.handover["c"] != 1 {
			t.Fatalf("leads per node %v: want a once, then one healthy node keeping the lease", m.handover)
		}
		if m.longest > 2*ttl {
			t.Fatalf("no leader for %s after the stalled node stepped down, want at most 2 TTLs", m.longest)
		}
	})
}

// logBuffer is a slog destination safe for concurrent writes.
type logBuffer = testutil.LogBuffer

// TestGoneHolderTakenAtOnce_I6: a runner that knows the lease's holder to
// have ended (Runner.Gone: an earlier process of its data directory) takes
// its unexpired lease at once, with the next term, and logs why; the dead
// term is fenced off (I6). A runner that does not know that holder gone (a
// twin: the same node id, another directory) waits, however often it asks.
func TestGoneHolderTakenAtOnce_I6(t *testing.T) {
	s := setup(t)
	ctx := t.Context()
	// The holder of a process that died (SIGKILL) a moment ago: its lease
	// runs for another minute.
	dead, err := s.AcquireLease(ctx, "b", "n1#dead", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var l leaders
	ttl := 300 * time.Millisecond // retries every 100ms
	var asks atomic.Int64
	stopTwin := run(t, &lease.Runner{Store: s, Holder: "n1#twin", Gone: func() []string { return []string{"n1#other"} }, TTL: ttl}, l.lead("n1#twin"),
		func(h backend.Lease, err error) {
			if errors.Is(err, event.ErrLeaseHeld) && h.Holder == "n1#dead" {
				asks.Add(1)
			}
		})
	testutil.Eventually(t, "the twin to ask five times", 10*time.Second, 5*time.Millisecond, func() bool { return asks.Load() >= 5 })
	stopTwin()
	if cur, terms, _ := l.get(); cur != "" || len(terms) != 0 {
		t.Fatalf("the twin led (terms %v) while the lease was live and its holder not known gone", terms)
	}

	logs := &logBuffer{}
	r := &lease.Runner{Store: s, Holder: "n1#new", Gone: func() []string { return []string{"n1#older", "n1#dead"} }, TTL: time.Minute,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	start := time.Now()
	stop := run(t, r, l.lead("n1#new"), nil)
	testutil.Eventually(t, "n1#new to lead", 10*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "n1#new" })
	t.Logf("the restarted runner led %s after it started; the dead holder's lease had %s left",
		time.Since(start).Round(time.Millisecond), time.Until(dead.Expires).Round(time.Millisecond))
	if _, terms, _ := l.get(); len(terms) != 1 || terms[0] != dead.Term+1 {
		t.Fatalf("terms %v, want the dead holder's term %d plus one", terms, dead.Term)
	}
	for _, want := range []string{"lease taken over at once", "previous_holder=n1#dead", fmt.Sprintf("previous_term=%d", dead.Term)} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("the log does not say %q:\n%s", want, logs.String())
		}
	}
	if _, err := s.RenewLease(ctx, dead, time.Minute); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("I6: the dead holder's renewal: %v, want ErrLeaseLost", err)
	}
	stop()
}

// aLeadsWithReleaseWake starts runner "a" (TTL a minute) and waits for it
// to lead; wake hears of every release of the store, as the node wires a
// runner's Released to the store's OnLeaseReleased.
func aLeadsWithReleaseWake(t *testing.T) (s *sqlite.Store, wake chan struct{}, l *leaders, ttl time.Duration, stopA func()) {
	t.Helper()
	s = setup(t)
	wake = make(chan struct{}, 1)
	s.OnLeaseReleased(func(string) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	l, ttl = &leaders{}, time.Minute
	stopA = run(t, &lease.Runner{Store: s, Holder: "a", TTL: ttl}, l.lead("a"), nil)
	testutil.Eventually(t, "a to lead", 5*time.Second, 5*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "a" })
	return s, wake, l, ttl, stopA
}

// TestReleasedWakesStandby: a standby whose Released channel hears of the
// release (as the node wires it to the store's OnLeaseReleased) takes the
// lease at once when the leader stops cleanly, not at its next retry a
// third of a TTL later (20 s here).
func TestReleasedWakesStandby(t *testing.T) {
	s, wake, l, ttl, stopA := aLeadsWithReleaseWake(t)
	var standing atomic.Bool
	stopB := run(t, &lease.Runner{Store: s, Holder: "b", TTL: ttl, Released: wake}, l.lead("b"), func(h backend.Lease, err error) {
		standing.Store(errors.Is(err, event.ErrLeaseHeld))
	})
	testutil.Eventually(t, "b to stand by", 5*time.Second, 5*time.Millisecond, standing.Load)
	start := time.Now()
	stopA()
	took := testutil.Eventually(t, "b to lead", 5*time.Second, 2*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "b" })
	t.Logf("b led %s after a's stop began (%s after it returned); its retry period is %s",
		time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond), ttl/3)
	stopB()
}

// TestReleaseWakesYieldingStandby: a standby at its placement share
// (Yield true) that yields the lease is woken by a release too, and counts
// the nodes again (Recount) before it asks Yield once more. When the count
// has grown its share (the releasing node left placement before it
// released), it takes the lease at once, not at its next attempt a third
// of a TTL later (20 s here): issue 17's clean stop with placement on.
// When its share is the same (a node above its share gave the lease up for
// a node below it), it goes on yielding. Never two leaders (I6).
func TestReleaseWakesYieldingStandby(t *testing.T) {
	for _, grown := range []bool{true, false} {
		t.Run(fmt.Sprintf("share grown %v", grown), func(t *testing.T) {
			s, wake, l, ttl, stopA := aLeadsWithReleaseWake(t)
			var atShare atomic.Bool
			atShare.Store(true)
			var recounts, yields atomic.Int64
			b := &lease.Runner{Store: s, Holder: "b", TTL: ttl, Released: wake,
				Yield: func() bool { yields.Add(1); return atShare.Load() },
				Recount: func(context.Context) {
					recounts.Add(1)
					if grown {
						atShare.Store(false)
					}
				}}
			var standing atomic.Bool
			stopB := run(t, b, l.lead("b"), func(h backend.Lease, err error) {
				standing.Store(errors.Is(err, event.ErrLeaseHeld))
			})
			testutil.Eventually(t, "b to yield to a", 5*time.Second, 5*time.Millisecond, standing.Load)
			if n := yields.Load(); n != 1 {
				t.Fatalf("b asked Yield %d times before a's release, want 1 (it waits a third of a TTL after each)", n)
			}
			start := time.Now()
			stopA()
			if grown {
				took := testutil.Eventually(t, "b to lead", 5*time.Second, 2*time.Millisecond, func() bool { c, _, _ := l.get(); return c == "b" })
				t.Logf("b, yielding, led %s after a's stop began (%s after it returned); its retry period is %s",
					time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond), ttl/3)
			} else {
				testutil.Eventually(t, "b to count again", 5*time.Second, 2*time.Millisecond, func() bool { return yields.Load() == 2 })
				time.Sleep(200 * time.Millisecond)
				if c, _, _ := l.get(); c != "" {
					t.Fatalf("%s leads; b at its share should have yielded the released lease again", c)
				}
			}
			if n := recounts.Load(); n != 1 {
				t.Fatalf("b counted again %d times, want once, after the release", n)
			}
			stopB()
			if _, terms, overlap := l.get(); overlap {
				t.Fatalf("two leaders at once (terms %v)", terms)
			}
		})
	}
}
