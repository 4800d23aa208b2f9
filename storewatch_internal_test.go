package orisun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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
