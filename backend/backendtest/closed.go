package backendtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// testClosed: Close is safe twice, and every operation of a closed store
// fails with event.ErrClosed.
func testClosed(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setup(t, open, "orders")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := t.Context()
	l := backend.Lease{Boundary: "orders", Holder: "n1", Term: 1}
	checks := map[string]error{}
	_, checks["Append"] = s.Append(ctx, "orders", batch(t, "orders", 1, "order.placed"), nil)
	_, _, checks["Read"] = s.Read(ctx, "orders", 0, 10, nil)
	_, _, checks["CreateBoundary"] = s.CreateBoundary(ctx, "other")
	_, checks["Boundary"] = s.Boundary(ctx, "orders")
	_, checks["Boundaries"] = s.Boundaries(ctx)
	_, checks["Checkpoint"] = s.Checkpoint(ctx, "orders")
	checks["SaveCheckpoint"] = s.SaveCheckpoint(ctx, "orders", l, 0)
	_, checks["AcquireLease"] = s.AcquireLease(ctx, "orders", "n1", nil, time.Second)
	_, checks["RenewLease"] = s.RenewLease(ctx, l, time.Second)
	checks["ReleaseLease"] = s.ReleaseLease(ctx, l)
	_, checks["LeaseHolder"] = s.LeaseHolder(ctx, "orders")
	for op, err := range checks {
		if !errors.Is(err, event.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
}

// NoGoroutineLeak opens a store with open three times, registers an
// OnAppend callback, appends and reads from 8 goroutines, and closes the
// store twice: once it is closed nothing of it may run (its workers, a
// listener, a pool's health check). started, when not nil, reports whether
// what the store starts in the background on its own (the PostgreSQL
// store's listener) is up, so that Close meets it running. It counts the
// process's goroutines: call it from a test that does not run in parallel,
// after anything the test opens that may outlive it.
func NoGoroutineLeak(t *testing.T, open func(t *testing.T) backend.Store, started func(s backend.Store) bool) {
	testutil.NoLeaks(t)
	for range 3 {
		s := open(t)
		Create(t, s, "orders")
		s.OnAppend(func(string) {})
		var wg sync.WaitGroup
		for range 8 {
			in := batch(t, "orders", 3, "order.placed")
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Append(context.Background(), "orders", in, nil); err != nil {
					t.Error(err)
				}
				if _, _, err := s.Read(context.Background(), "orders", 0, 100, nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if started != nil {
			testutil.Eventually(t, "the store's background work is up", queueWait, queueTick, func() bool { return started(s) })
		}
		for range 2 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
