package orisun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/metrics"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/testutil"
)

// lockedBuffer is a log destination the test counts lines of.
type lockedBuffer struct{ testutil.LogBuffer }

func (l *lockedBuffer) count(s string) int { return strings.Count(l.String(), s) }

// TestStoreWatchOncePerChange: the store watch's rules, with the outcomes
// a store gives (the backends' own tests and TestStoreWriteOutageSQLite_I7,
// TestStoreOutagePostgres_I7 give them for real). Answers (a conflict, a
// lease held) and a caller that gave up are no failure; a failure is
// logged once however many follow; a success within a second of a failure
// does not end it (a store going down answers some sessions and fails
// others), a success a second later does, and so does the node's next
// look once a second passed after a success; a probe speaks only for a
// kind not tried for 5s.
func TestStoreWatchOncePerChange(t *testing.T) {
	logs := &lockedBuffer{}
	w := newStoreWatch(slog.New(slog.NewTextHandler(logs, nil)), metrics.New(0))
	ctx := context.Background()
	full := fmt.Errorf("append: %w: database or disk is full", event.ErrUnavailable)
	gaveUp, cancel := context.WithCancel(ctx)
	cancel()

	w.done(ctx, metrics.OpAppend, kindAppend, event.ErrConflict)
	w.done(ctx, metrics.OpAcquireLease, kindLease, event.ErrLeaseHeld)
	w.done(gaveUp, metrics.OpAppend, kindAppend, context.Canceled)
	if ok, _, _, _ := w.health(); !ok {
		t.Fatal("answers and a caller that gave up made the store fail")
	}
	for range 50 {
		w.done(ctx, metrics.OpAppend, kindAppend, full)
		w.done(ctx, metrics.OpAppend, kindAppend, nil) // within a second: no end
	}
	ok, since, what, _ := w.health()
	if ok || since.IsZero() || !strings.Contains(what, "appends fail since") || !strings.Contains(what, "disk is full") {
		t.Fatalf("after 50 failures: ok %v since %v what %q", ok, since, what)
	}
	if n := logs.count("store failing"); n != 1 {
		t.Fatalf("50 failures logged %d times", n)
	}

	// A second without a failure, the last outcome a success: ended at
	// the next look.
	w.mu.Lock()
	w.kinds[kindAppend].failed = time.Now().Add(-storeSettle)
	w.mu.Unlock()
	if ok, _, what, _ := w.health(); !ok {
		t.Fatalf("a success and a second without failure: still %q", what)
	}
	if n := logs.count("store works again: appends succeed"); n != 1 {
		t.Fatalf("the end logged %d times:\n%s", n, logs.String())
	}

	// A probe clears a kind not tried for storeIdle, and only that one.
	w.done(ctx, metrics.OpSaveCheckpoint, kindCheckpoint, full)
	w.done(ctx, metrics.OpAppend, kindAppend, full)
	w.mu.Lock()
	w.kinds[kindCheckpoint].tried = time.Now().Add(-storeIdle - time.Second)
	w.mu.Unlock()
	w.probed(time.Now())
	if ok, _, what, _ := w.health(); ok || strings.Contains(what, "checkpoint") || !strings.Contains(what, "appends fail") {
		t.Fatalf("after a probe: %q (the checkpoint writes untried for 5s end, the appends just tried do not)", what)
	}
	if n := logs.count("store works again: a write probe succeeded (no checkpoint write tried"); n != 1 {
		t.Fatalf("the probe's end logged %d times:\n%s", n, logs.String())
	}
}

// TestStoreWatchDeadlines: a deadline the caller chose is its answer, not
// the store's failure (an application's Node.Append with a timeout of its
// own, a subscription's short look at the store); a deadline the node set
// on its own work is: the API's request timeout and the status listener's
// measurement (serviceutil.WithTimeout), and any deadline of lease and
// checkpoint writes, which only the node makes.
func TestStoreWatchDeadlines(t *testing.T) {
	expired := func(ctx context.Context, err error) context.Context {
		t.Helper()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), err) {
			t.Fatalf("ctx ended with %v, want %v", ctx.Err(), err)
		}
		return ctx
	}
	callers, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	callers = expired(callers, context.DeadlineExceeded)
	own, cancel := serviceutil.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	own = expired(own, context.DeadlineExceeded)
	// A context derived from the node's (the store's own sub-steps) keeps
	// the cause.
	derived, cancel := context.WithCancel(own)
	defer cancel()
	timedOut := fmt.Errorf("append: %w: interrupted", event.ErrUnavailable)
	for _, c := range []struct {
		name string
		ctx  context.Context
		kind int
		want bool
	}{
		{"a caller's deadline, append", callers, kindAppend, false},
		{"a caller's deadline, read", callers, kindRead, false},
		{"a caller's deadline, boundary", callers, kindBoundary, false},
		{"the node's deadline, append", own, kindAppend, true},
		{"the node's deadline, read, derived", derived, kindRead, true},
		{"a lease write's deadline", callers, kindLease, true},
		{"a checkpoint write's deadline", callers, kindCheckpoint, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			w := newStoreWatch(slog.New(slog.NewTextHandler(logs, nil)), metrics.New(0))
			w.done(c.ctx, metrics.OpAppend, c.kind, timedOut)
			ok, _, what, _ := w.health()
			if ok == c.want {
				t.Fatalf("store ok %v after %s (%q); want failing: %v", ok, c.name, what, c.want)
			}
			if n := logs.count("store failing"); (n == 1) != c.want {
				t.Fatalf("%q logged %d times; want failing: %v", "store failing", n, c.want)
			}
		})
	}
}

// watchFake is a store whose reads fail with err; statesPart and
// probePart add the optional interfaces watchStore keeps.
type watchFake struct {
	backend.Store
	err error
}

func (f watchFake) Boundary(context.Context, string) (event.Boundary, error) {
	return event.Boundary{}, f.err
}

type statesPart struct{ err error }

func (p statesPart) BoundaryStates(context.Context) ([]backend.BoundaryState, error) {
	return nil, p.err
}

type probePart struct{ err error }

func (p probePart) HeadHolder(context.Context, string) (string, error) { return "", p.err }

// TestWatchStoreKeepsOptionalInterfaces: the watched store has
// backend.StateReader and the publisher's HeadProber exactly when the
// store has them, and their calls, like the store's, reach the store and
// tell the watch of a failure.
func TestWatchStoreKeepsOptionalInterfaces(t *testing.T) {
	down := fmt.Errorf("read: %w: connection refused", event.ErrUnavailable)
	fake := watchFake{err: down}
	for _, c := range []struct {
		name           string
		s              backend.Store
		states, probes bool
	}{
		{"neither", fake, false, false},
		{"states", struct {
			watchFake
			statesPart
		}{fake, statesPart{down}}, true, false},
		{"probe", struct {
			watchFake
			probePart
		}{fake, probePart{down}}, false, true},
		{"both", struct {
			watchFake
			statesPart
			probePart
		}{fake, statesPart{down}, probePart{down}}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			calls := map[string]func(s backend.Store) error{
				"Boundary": func(s backend.Store) error { _, err := s.Boundary(ctx, "b"); return err },
			}
			ws := watchStore(c.s, newStoreWatch(slog.New(slog.DiscardHandler), metrics.New(0)))
			if _, ok := ws.(backend.StateReader); ok != c.states {
				t.Fatalf("the watched store is a StateReader: %v, the store: %v", ok, c.states)
			} else if ok {
				calls["BoundaryStates"] = func(s backend.Store) error {
					_, err := s.(backend.StateReader).BoundaryStates(ctx)
					return err
				}
			}
			if _, ok := ws.(headProber); ok != c.probes {
				t.Fatalf("the watched store is a HeadProber: %v, the store: %v", ok, c.probes)
			} else if ok {
				calls["HeadHolder"] = func(s backend.Store) error {
					_, err := s.(headProber).HeadHolder(ctx, "b")
					return err
				}
			}
			for name, call := range calls {
				w := newStoreWatch(slog.New(slog.DiscardHandler), metrics.New(0))
				if err := call(watchStore(c.s, w)); !errors.Is(err, down) {
					t.Fatalf("%s: %v, want the store's %v", name, err, down)
				}
				if ok, _, what, readsFail := w.health(); ok || !readsFail {
					t.Fatalf("after a failed %s: ok %v, reads fail %v (%q); want the reads failing", name, ok, readsFail, what)
				}
			}
		})
	}
}
