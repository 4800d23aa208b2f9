package orisun_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestHandlerErrorEndsSubscription: the handler's error ends the
// subscription, wrapped with the position; nothing after it is delivered.
func TestHandlerErrorEndsSubscription(t *testing.T) {
	n := setup(t, "", nil)
	ctx := context.Background()
	mustAppend(t, ctx, n, "default", events(10, "a", 16))
	boom := errors.New("boom")
	var seen []uint64
	err := n.Subscribe(ctx, "default", 0, func(_ context.Context, e orisun.Event) error {
		seen = append(seen, e.Position)
		if e.Position == 4 {
			return boom
		}
		return nil
	}, orisun.SubscribeOptions{})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "position 4") {
		t.Fatalf("got %v", err)
	}
	if len(seen) != 4 {
		t.Fatalf("delivered %v", seen)
	}
}

// TestSubscribeRefused_I5: a subscription that cannot be served is a
// clear error, never a silent continue or an endless wait: resuming with a
// saved epoch that is not the boundary's is ErrEpochChanged (I5); an
// unknown boundary is ErrNotFound; a nil handler is refused before
// anything is read, not a nil-function panic at the first event; resuming
// after a position the boundary does not have (a restored store) is
// refused, beyond the int64 range of the stores too, up to the largest
// uint64 (whose next position would wrap round to 0). At the head is no
// error: the subscription waits for the next position.
func TestSubscribeRefused_I5(t *testing.T) {
	n := setup(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mustAppend(t, ctx, n, "default", events(3, "a", 16))
	noop := func(context.Context, orisun.Event) error { return nil }
	const beyond, limit = "beyond the head", "positions end at 9223372036854775807"
	for _, c := range []struct {
		name     string
		boundary string
		after    uint64
		handler  func(context.Context, orisun.Event) error
		opts     orisun.SubscribeOptions
		want     error
		saying   []string
	}{
		{"another epoch", "default", 1, noop, orisun.SubscribeOptions{Epoch: "00000000-0000-0000-0000-000000000000"}, event.ErrEpochChanged, nil},
		{"unknown boundary", "nosuch", 0, noop, orisun.SubscribeOptions{}, event.ErrNotFound, nil},
		{"nil handler", "default", 0, nil, orisun.SubscribeOptions{}, event.ErrInvalid, []string{"handler"}},
		{"after 7", "default", 7, noop, orisun.SubscribeOptions{}, event.ErrInvalid, []string{beyond}},
		{"after the largest int64", "default", math.MaxInt64, noop, orisun.SubscribeOptions{}, event.ErrInvalid, []string{beyond}},
		{"after the int64 range", "default", math.MaxInt64 + 1, noop, orisun.SubscribeOptions{}, event.ErrInvalid, []string{beyond, limit}},
		{"after the largest uint64", "default", math.MaxUint64, noop, orisun.SubscribeOptions{}, event.ErrInvalid, []string{beyond, limit}},
	} {
		err := n.Subscribe(ctx, c.boundary, c.after, c.handler, c.opts)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.want)
		}
		for _, s := range c.saying {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: error %q does not say %q", c.name, err, s)
			}
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	if err := n.Subscribe(sctx, "default", 3, noop, orisun.SubscribeOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("subscribing at the head: %v", err)
	}
}

// TestAppendWakesThePublisher: with a poll interval of an hour, appended
// events are still published and delivered live at once: the store's
// after-commit signal wakes the boundary's publisher (docs/design.md §5 step 5),
// the poll interval is only the fallback.
func TestAppendWakesThePublisher(t *testing.T) {
	n := setup(t, "", func(c *orisun.Config) { c.PollInterval = time.Hour })
	ctx := context.Background()
	waitSettled(t, n, 30*time.Second)
	r := newRecorder(0)
	live := newLiveSignal()
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{OnCaughtUp: live.caughtUp})
	live.wait(t, "the subscription", nil)
	for i := 1; i <= 3; i++ {
		mustAppend(t, ctx, n, "default", events(10, "woken", 32))
		// Generous for a loaded machine, and far below the hour.
		st := waitSettled(t, n, 30*time.Second)
		if st.Boundaries[0].Published != uint64(10*i) {
			t.Fatalf("published %d, want %d", st.Boundaries[0].Published, 10*i)
		}
		waitDelivered(t, r, uint64(10*i), 30*time.Second)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, r)
}

// TestCreateBoundaryAtRuntime: a boundary created through the API gets a
// publisher and its events reach its stream.
func TestCreateBoundaryAtRuntime(t *testing.T) {
	n := setup(t, "", nil)
	ctx := context.Background()
	b, err := n.CreateBoundary(ctx, "late")
	if err != nil || b.Epoch == "" {
		t.Fatalf("%+v %v", b, err)
	}
	again, err := n.CreateBoundary(ctx, "late")
	if err != nil || again.Epoch != b.Epoch {
		t.Fatalf("creating again changed the boundary: %+v %v", again, err)
	}
	if _, err := n.CreateBoundary(ctx, "Bad.Name"); !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	mustAppend(t, ctx, n, "late", events(5, "a", 16))
	waitSettled(t, n, 10*time.Second)
	if _, last := checkStream(t, n, "late"); last != 5 {
		t.Fatalf("stream last %d", last)
	}
}

// TestIdempotentRetryThroughNode: an append resent with the same ids returns
// the same positions and writes nothing (docs/design.md §3).
func TestIdempotentRetryThroughNode(t *testing.T) {
	n := setup(t, "", nil)
	ctx := context.Background()
	in := events(3, "a", 16)
	for i := range in {
		in[i].ID = event.NewID()
	}
	first, err := n.Append(ctx, "default", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.Append(ctx, "default", in, nil)
	if err != nil || again != first {
		t.Fatalf("retry: %+v %v, first %+v", again, err, first)
	}
	in[1].Data = []byte(`{"other":true}`)
	if _, err := n.Append(ctx, "default", in, nil); !errors.Is(err, event.ErrConflict) {
		t.Fatalf("retry with other content: %v", err)
	}
	bs, _ := n.Boundaries(ctx)
	if bs[0].Head != 3 {
		t.Fatalf("head %d after retries, want 3", bs[0].Head)
	}
}

// TestNoGoroutineLeak: a node that appended, published, served a
// subscription and its status listener leaves no goroutine behind once stopped.
func TestNoGoroutineLeak(t *testing.T) {
	testutil.NoLeaks(t)
	dir := t.TempDir()
	n, err := orisun.New(orisun.Config{DataDir: dir, NATSPort: -1, PollInterval: 20 * time.Millisecond, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The status listener too: a request and a scrape.
	for _, path := range []string{"/status", "/metrics"} {
		if code, _ := httpGet(t, n, path); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
	}
	mustAppend(t, ctx, n, "default", events(100, "a", 16))
	r := newRecorder(0)
	done := make(chan error, 1)
	go func() { done <- n.Subscribe(ctx, "default", 0, r.handle, orisun.SubscribeOptions{}) }()
	waitDelivered(t, r, 100, 10*time.Second)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, event.ErrClosed) {
		t.Fatalf("subscription ended with %v, want ErrClosed", err)
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

// TestStopBeforeStart: Stop is safe before Start, and Start after Stop is
// refused.
func TestStopBeforeStart(t *testing.T) {
	n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("start after stop: %v", err)
	}
	if _, err := n.Append(context.Background(), "default", events(1, "a", 8), nil); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("append on a stopped node: %v", err)
	}
}

// TestStopUnderAppendLoad: Stop while appends are in flight returns (the
// store's after-commit wake-up must not wait for the stopping node) and
// every append either succeeded or failed with ErrClosed; a concurrent
// second Stop waits for the first.
func TestStopUnderAppendLoad(t *testing.T) {
	n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			for {
				if _, err := n.Append(ctx, "default", events(10, "load", 64), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	stopped := make(chan error, 2)
	go func() { stopped <- n.Stop() }()
	go func() { stopped <- n.Stop() }()
	for i := 0; i < 2; i++ {
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Stop did not return under append load")
		}
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; !errors.Is(err, event.ErrClosed) {
			t.Fatalf("append during stop: %v, want ErrClosed", err)
		}
	}
}

// TestRuntimeBoundaryPublishedAfterRestart: a boundary created through the
// API, not in the configuration, gets its publisher again after a restart.
func TestRuntimeBoundaryPublishedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n1 := setup(t, dir, nil)
	if _, err := n1.CreateBoundary(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Append(ctx, "late", events(3, "a", 16), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n1, 10*time.Second)
	if err := n1.Stop(); err != nil {
		t.Fatal(err)
	}
	n2 := setup(t, dir, nil)
	if _, err := n2.Append(ctx, "late", events(2, "a", 16), nil); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, n2, 10*time.Second)
	for _, b := range st.Boundaries {
		if b.Name == "late" && (b.Head != 5 || b.State != "leading") {
			t.Fatalf("%+v", b)
		}
	}
}

// TestBoundaryNameCheckedBeforeReadiness: CreateBoundary and Boundary judge
// the name before whether the node serves, so a bad name is ErrInvalid
// even on a node not started or stopped, and a good one on such a node is
// ErrUnavailable or ErrClosed (a caller fixes the name first; retrying it
// would not help).
func TestBoundaryNameCheckedBeforeReadiness(t *testing.T) {
	cfg := orisun.Defaults()
	// No port of its own: not the default status listener either, which a
	// developer's orisun may hold while the tests run (.ci/run holds it).
	cfg.DataDir, cfg.NATSPort, cfg.HTTPAddr = t.TempDir(), -1, "off"
	n, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func(string) error{
		"CreateBoundary": func(b string) error { _, err := n.CreateBoundary(ctx, b); return err },
		"Boundary":       func(b string) error { _, err := n.Boundary(ctx, b); return err },
	}
	for name, call := range calls {
		if err := call("Bad Name"); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("%s of a bad name on a node not started: %v, want ErrInvalid", name, err)
		}
		if err := call("fine"); !errors.Is(err, event.ErrUnavailable) {
			t.Errorf("%s on a node not started: %v, want ErrUnavailable", name, err)
		}
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, call := range calls {
		if err := call("Bad Name"); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("%s of a bad name on a stopped node: %v, want ErrInvalid", name, err)
		}
		if err := call("fine"); !errors.Is(err, event.ErrClosed) {
			t.Errorf("%s on a stopped node: %v, want ErrClosed", name, err)
		}
	}
}
