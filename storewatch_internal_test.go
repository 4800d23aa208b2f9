package orisun

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/metrics"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

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
		t.Fatalf("the end logged %d times:\n%s", n, logs.b.String())
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
		t.Fatalf("the probe's end logged %d times:\n%s", n, logs.b.String())
	}
}
