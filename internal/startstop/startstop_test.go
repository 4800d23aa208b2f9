package startstop_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/startstop"
	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
)

// part is a long-lived part as the real ones are built: a start step that
// starts goroutines with Go, a stop step that ends them. It records what a
// correct Base must never let happen.
type part struct {
	life startstop.Base
	t    testing.TB

	mu                sync.Mutex
	starts, stops     int
	inStart, stopping bool
	quit              chan struct{}
	alive             atomic.Int32 // goroutines of the part still running
	violations        []string
}

func (p *part) violate(s string) {
	p.mu.Lock()
	p.violateLocked(true, s)
	p.mu.Unlock()
}

// violateLocked records s if bad; the caller holds p.mu.
func (p *part) violateLocked(bad bool, s string) {
	if bad {
		p.violations = append(p.violations, s)
	}
}

func (p *part) Start(ctx context.Context) error { return p.life.Start(ctx, p.start, p.stop) }

func (p *part) Stop() error {
	err := p.life.Stop(p.stop)
	// Stop returns only once every goroutine of the part has ended.
	if n := p.alive.Load(); n != 0 {
		p.violate("Stop returned with goroutines of the part running")
	}
	return err
}

func (p *part) start(context.Context) error {
	p.mu.Lock()
	p.starts++
	p.violateLocked(p.starts > 1, "start ran twice")
	p.violateLocked(p.stopping, "start ran after stop")
	p.inStart = true
	p.quit = make(chan struct{})
	p.mu.Unlock()
	for range 3 {
		p.alive.Add(1)
		if !p.life.Go(func() { defer p.alive.Add(-1); p.work() }) {
			p.alive.Add(-1)
			p.violate("Go refused during start")
		}
	}
	time.Sleep(time.Millisecond) // widen the window for a Stop
	p.mu.Lock()
	p.inStart = false
	p.mu.Unlock()
	return nil
}

// work is a goroutine of the part: it starts another one, as a publisher's
// run starts its checkpointer, and runs until stop.
func (p *part) work() {
	p.alive.Add(1)
	if !p.life.Go(func() { defer p.alive.Add(-1); <-p.quit }) {
		p.alive.Add(-1) // refused: Wait has begun, and it must not wait for it
	}
	<-p.quit
}

func (p *part) stop() error {
	p.mu.Lock()
	p.stops++
	p.violateLocked(p.stops > 1, "stop ran twice")
	p.violateLocked(p.inStart, "stop ran during start")
	p.stopping = true
	quit := p.quit
	p.mu.Unlock()
	if quit != nil {
		close(quit)
	}
	return nil
}

func (p *part) check(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.violations {
		t.Error(v)
	}
	if p.stops != 1 {
		t.Errorf("stop ran %d times, want once", p.stops)
	}
	select {
	case <-p.life.Done():
	default:
		t.Error("Done is not closed after Stop")
	}
	if p.life.State() != startstop.Stopped {
		t.Errorf("state %s after Stop", p.life.State())
	}
	if p.life.Go(func() {}) {
		t.Error("Go accepted a goroutine after Stop")
	}
	if p.life.IfRunning(func() { t.Error("IfRunning ran its function after Stop") }) {
		t.Error("IfRunning reported running after Stop")
	}
}

// TestStress: many goroutines start and stop one part at once; start and
// stop run at most once each and never at the same time, Stop returns only
// once every goroutine of the part has ended, and none is left behind.
func TestStress(t *testing.T) {
	startstoptest.Stress(t, func(t testing.TB) startstoptest.Part { return &part{t: t} }, startstoptest.Options{
		Rounds: 200,
		Check:  func(t testing.TB, p startstoptest.Part) { p.(*part).check(t) },
	})
}

// TestStopBeforeStart: Stop before Start runs stop (a part may have work
// before it is started) and makes Start fail with ErrStopped.
func TestStopBeforeStart(t *testing.T) {
	var b startstop.Base
	ran := 0
	if err := b.Stop(func() error { ran++; return nil }); err != nil {
		t.Fatal(err)
	}
	if ran != 1 {
		t.Fatalf("stop ran %d times", ran)
	}
	started := false
	err := b.Start(context.Background(), func(context.Context) error { started = true; return nil }, nil)
	if !errors.Is(err, startstop.ErrStopped) || started {
		t.Fatalf("Start after Stop: %v (start ran: %v), want ErrStopped without running start", err, started)
	}
	if b.Started() {
		t.Fatal("Started after a Start that never ran")
	}
}

// TestFailedStart: a start that fails is undone by stop at once, before
// Start returns its error; the part is stopped, and every later Stop
// returns stop's error without running it again.
func TestFailedStart(t *testing.T) {
	var b startstop.Base
	boom, undo := errors.New("boom"), errors.New("undo failed")
	stops := 0
	var inGo atomic.Bool
	err := b.Start(context.Background(), func(context.Context) error {
		b.Go(func() { inGo.Store(true); time.Sleep(20 * time.Millisecond); inGo.Store(false) })
		return boom
	}, func() error { stops++; return undo })
	if !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want start's error", err)
	}
	if stops != 1 {
		t.Fatalf("stop ran %d times after a failed start, want once", stops)
	}
	if inGo.Load() {
		t.Fatal("Start returned before the goroutines of the failed start ended")
	}
	if b.State() != startstop.Stopped || b.Started() {
		t.Fatalf("state %s, started %v after a failed start", b.State(), b.Started())
	}
	for range 2 {
		if err := b.Stop(func() error { stops++; return nil }); !errors.Is(err, undo) {
			t.Fatalf("Stop after a failed start: %v, want %v", err, undo)
		}
	}
	if stops != 1 {
		t.Fatalf("stop ran %d times, want once", stops)
	}
	if err := b.Start(context.Background(), func(context.Context) error { return nil }, nil); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("Start after a failed start: %v", err)
	}
}

// TestStopWaitsForStart: a Stop that arrives while start runs waits for it,
// and a second Start while the first runs waits and returns nil.
func TestStopWaitsForStart(t *testing.T) {
	var b startstop.Base
	release := make(chan struct{})
	inStart := make(chan struct{})
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	go func() {
		_ = b.Start(context.Background(), func(context.Context) error {
			close(inStart)
			<-release
			note("start")
			return nil
		}, nil)
	}()
	<-inStart
	second := make(chan error, 1)
	go func() {
		second <- b.Start(context.Background(), func(context.Context) error { note("start again"); return nil }, nil)
	}()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(func() error { note("stop"); return nil }) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("Stop returned while start runs")
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	err := <-second
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 2 || order[0] != "start" || order[1] != "stop" {
		t.Fatalf("order %v, want [start stop]", order)
	}
	// The second Start ran either before the Stop (nil: already running)
	// or after it (ErrStopped); it never ran start.
	if err != nil && !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("second Start: %v", err)
	}
}

// TestIfRunning: IfRunning waits for a start in progress, runs its
// function while running, and a Stop waits for a function in progress.
func TestIfRunning(t *testing.T) {
	var b startstop.Base
	if b.IfRunning(func() { t.Error("ran before Start") }) {
		t.Fatal("IfRunning before Start")
	}
	if err := b.Start(context.Background(), func(context.Context) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	in, release := make(chan struct{}), make(chan struct{})
	var stopBegan atomic.Bool
	go b.IfRunning(func() {
		close(in)
		<-release
		if stopBegan.Load() {
			t.Error("stop began while an IfRunning function ran")
		}
	})
	<-in
	stopped := make(chan struct{})
	go func() {
		_ = b.Stop(func() error { stopBegan.Store(true); return nil })
		close(stopped)
	}()
	time.Sleep(20 * time.Millisecond)
	close(release)
	<-stopped
}
