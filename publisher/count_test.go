package publisher_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/stream"
)

// failingSaves is a store whose checkpoint writes fail while fail is set,
// or, with every > 0, one write in every up to most failures: the disk
// full under a running publisher.
type failingSaves struct {
	*sqlite.Store
	fail   atomic.Bool
	every  int64
	most   int64
	saves  atomic.Int64
	failed atomic.Int64
}

func (f *failingSaves) SaveCheckpoint(ctx context.Context, b string, l backend.Lease, pos uint64) error {
	n := f.saves.Add(1)
	if f.fail.Load() || (f.every > 0 && n%f.every == 0 && f.failed.Load() < f.most) {
		f.failed.Add(1)
		return event.ErrUnavailable
	}
	return f.Store.SaveCheckpoint(ctx, b, l, pos)
}

// tally sums what a publisher's OnPublished is told.
type tally struct {
	mu     sync.Mutex
	events int
}

func (c *tally) add(n int, _ uint64, _ time.Duration, _ bool) {
	c.mu.Lock()
	c.events += n
	c.mu.Unlock()
}

func (c *tally) sum() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// TestPublishedCountAfterFailedCheckpoints_I3: checkpoint writes that fail
// now and then under a stream of appends end a drain with batches in
// flight, published but never awaited; the next sync finds them in the
// stream. OnPublished (the node's orisun_published_events_total) is told
// of each event once: after everything is checkpointed it is told of
// exactly the stream's messages, neither fewer (the batches in flight when
// a drain ended) nor more (events told of that the checkpoint had not
// reached).
func TestPublishedCountAfterFailedCheckpoints_I3(t *testing.T) {
	e := setup(t)
	store := &failingSaves{Store: e.store, every: 3, most: 6}
	var told tally
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: store, JS: e.js, BatchSize: 20, Window: 16,
		PollInterval: 20 * time.Millisecond, Wake: wake, Limits: stream.Limits{Batched: true}, OnPublished: told.add})
	stop := run(t, p, e.lease(t))
	const total = 3000
	for range total / 10 {
		e.append(t, 10)
		poke(wake)
	}
	e.waitCheckpoint(t, total, 60*time.Second)
	stopped(t, stop)
	e.wantStreamLast(t, total)
	if store.failed.Load() == 0 {
		t.Fatal("no checkpoint write failed: the test tried nothing")
	}
	if got := told.sum(); got != total {
		t.Fatalf("OnPublished was told of %d events for a stream of %d (%d checkpoint writes failed)", got, total, store.failed.Load())
	}
	t.Logf("%d of %d checkpoint writes failed", store.failed.Load(), store.saves.Load())
}

// TestPublishedCountOnTakeover: events in the stream beyond the checkpoint
// (their publisher's checkpoint writes all failed) are counted by the
// publisher that takes over and finds them, once; the publisher that
// published them counted them when acknowledged and, run again, does not
// count them a second time.
func TestPublishedCountOnTakeover(t *testing.T) {
	e := setup(t)
	e.append(t, 10)
	store := &failingSaves{Store: e.store}
	store.fail.Store(true)
	var first, second tally
	cfg := publisher.Config{Boundary: "b", Store: store, JS: e.js, BatchSize: 50,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}, OnPublished: first.add}
	p1 := publisher.New(cfg)
	l := e.lease(t)
	stop := run(t, p1, l)
	testutil.Eventually(t, "the 10 events in the stream", 10*time.Second, 5*time.Millisecond, func() bool { return e.streamLast() == 10 })
	// Its syncs retry the checkpoint meanwhile, finding the same events.
	testutil.Eventually(t, "a checkpoint write retried by a sync", 10*time.Second, 5*time.Millisecond, func() bool { return store.failed.Load() >= 3 })
	_ = stop() // ends with the failed checkpoint's error
	if cp := e.checkpoint(); cp != 0 {
		t.Fatalf("checkpoint %d with every write failing", cp)
	}
	if got := first.sum(); got != 10 {
		t.Fatalf("the first publisher was told of %d events, want the 10 it published once", got)
	}
	store.fail.Store(false)

	cfg.OnPublished = second.add
	stop = run(t, publisher.New(cfg), l)
	e.waitCheckpoint(t, 10, 10*time.Second)
	stopped(t, stop)
	if got := second.sum(); got != 10 {
		t.Fatalf("the publisher taking over was told of %d events, want the 10 it found in the stream", got)
	}

	e.append(t, 5)
	stop = run(t, p1, l)
	e.waitCheckpoint(t, 15, 10*time.Second)
	stopped(t, stop)
	if got := first.sum(); got != 15 {
		t.Fatalf("the first publisher, run again, was told of %d events in all, want 15 (its 10, and the 5 new)", got)
	}
	e.wantStreamLast(t, 15)
}
