package publisher_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/stream"
)

// tally sums what a publisher's OnPublished and OnFound are told, as the
// node's orisun_published_events_total does.
type tally struct {
	mu            sync.Mutex
	events, found int
	last          uint64 // the last position told of
}

func (c *tally) published(n int, last uint64, _ time.Duration, _ bool) {
	c.mu.Lock()
	c.events += n
	c.last = last
	c.mu.Unlock()
}

func (c *tally) foundIn(n int, last uint64) {
	c.mu.Lock()
	c.events += n
	c.found += n
	c.last = last
	c.mu.Unlock()
}

func (c *tally) lastTold() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *tally) sum() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// config is the tests' publisher configuration cfg on store, told into c.
func (c *tally) config(store backend.Store, cfg publisher.Config) publisher.Config {
	cfg.Boundary, cfg.Store, cfg.PollInterval = "b", store, 20*time.Millisecond
	cfg.Limits = stream.Limits{Batched: true}
	cfg.OnPublished, cfg.OnFound = c.published, c.foundIn
	return cfg
}

// newPublisher is a publisher of e's boundary on store, pages of 50, told
// into c.
func (c *tally) newPublisher(e *env, store backend.Store) *publisher.Publisher {
	return publisher.New(c.config(store, publisher.Config{JS: e.js, BatchSize: 50}))
}

// uncheckpointed runs p, told into c, under l until it was told of
// position last and the stream ends there, every checkpoint write of
// store failing meanwhile, and stops the run (it ends with the failed
// write's error, or is stopped retrying it).
func (e *env) uncheckpointed(t *testing.T, p *publisher.Publisher, c *tally, l backend.Lease, store *failingSaves, last uint64) {
	t.Helper()
	store.fail.Store(true)
	defer store.fail.Store(false)
	stop := run(t, p, l)
	testutil.Eventually(t, fmt.Sprintf("the stream published to %d, no checkpoint written", last), 10*time.Second, 5*time.Millisecond,
		func() bool { return c.lastTold() == last && e.streamLast() == last })
	_ = stop()
}

// checkpointed runs p under l until the checkpoint is at pos, and stops
// the run, which must end without an error.
func (e *env) checkpointed(t *testing.T, p *publisher.Publisher, l backend.Lease, pos uint64) {
	t.Helper()
	stop := run(t, p, l)
	e.waitCheckpoint(t, pos, 10*time.Second)
	stopped(t, stop)
}

// newEpoch replaces e's store, and the one store wraps, by another store
// of the same boundary: a new epoch, as a restore from elsewhere makes
// one. It returns a lease of the boundary in it. No run may be going on.
func (e *env) newEpoch(t *testing.T, store *failingSaves) backend.Lease {
	t.Helper()
	ctx := context.Background()
	other := storetest.SQLite(t, sqlite.Config{Dir: t.TempDir()})
	if _, _, err := other.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	e.store, store.Store = other, other // e.append and e.checkpoint now use it
	l, err := other.AcquireLease(ctx, "b", "n", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPublishedCountAfterFailedCheckpoints: checkpoint writes that fail
// now and then under a stream of appends end a drain with batches in
// flight, published but never awaited; the next sync finds them in the
// stream. OnPublished and OnFound together (the node's
// orisun_published_events_total) are told of each event once: after
// everything is checkpointed they were told of exactly the stream's
// messages, neither fewer (the batches in flight when a drain ended) nor
// more (events told of that the checkpoint had not reached).
func TestPublishedCountAfterFailedCheckpoints(t *testing.T) {
	e := setup(t)
	store := &failingSaves{Store: e.store, every: 3, most: 6}
	var told tally
	wake := make(chan struct{}, 1)
	p := publisher.New(told.config(store, publisher.Config{JS: e.js, BatchSize: 20, Window: 16, Wake: wake}))
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
		t.Fatalf("the publisher was told of %d events (%d of them found) for a stream of %d (%d checkpoint writes failed)",
			got, told.found, total, store.failed.Load())
	}
	t.Logf("%d of %d checkpoint writes failed; %d events found in the stream", store.failed.Load(), store.saves.Load(), told.found)
}

// TestPublishedCountOnTakeover: events in the stream beyond the checkpoint
// (their publisher's checkpoint writes all failed) are found by the
// publisher that takes over, once, before its checkpoint moves past them
// (the status's published position is the checkpoint: it must not show
// more than was counted); the publisher that published them was told of
// them when acknowledged and, run again, is not told a second time.
func TestPublishedCountOnTakeover(t *testing.T) {
	e := setup(t)
	e.append(t, 10)
	store := &failingSaves{Store: e.store}
	store.fail.Store(true)
	var first, second tally
	p1 := first.newPublisher(e, store)
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

	var ahead atomic.Value // a checkpoint written beyond what second was told of
	store.saved = func(pos uint64) {
		if told := second.sum(); uint64(told) < pos {
			ahead.CompareAndSwap(nil, fmt.Sprintf("checkpoint %d written when the publisher was told of %d events", pos, told))
		}
	}
	e.checkpointed(t, second.newPublisher(e, store), l, 10)
	store.saved = nil
	if got := second.sum(); got != 10 || second.found != 10 {
		t.Fatalf("the publisher taking over was told of %d events (%d found), want the 10 it found in the stream", got, second.found)
	}
	if a := ahead.Load(); a != nil {
		t.Fatal(a)
	}

	e.append(t, 5)
	e.checkpointed(t, p1, l, 15)
	if got := first.sum(); got != 15 || first.found != 0 {
		t.Fatalf("the first publisher, run again, was told of %d events in all (%d found), want 15 (its 10, and the 5 new)", got, first.found)
	}
	e.wantStreamLast(t, 15)
}

// TestFoundCountedInANewEpoch: what a publisher was told of in one epoch
// does not hide the events it finds in the next. The store is replaced by
// another of the same boundary (a new epoch); another publisher publishes
// its 10 events, every checkpoint write failing; the first, which was
// told of 10 positions of the old epoch, finds the new epoch's 10 and is
// told of them.
func TestFoundCountedInANewEpoch(t *testing.T) {
	e := setup(t)
	e.append(t, 10)
	store := &failingSaves{Store: e.store}
	var first, second tally
	p1 := first.newPublisher(e, store)
	e.uncheckpointed(t, p1, &first, e.lease(t), store, 10)
	if got := first.sum(); got != 10 {
		t.Fatalf("the first publisher was told of %d events, want 10", got)
	}

	l := e.newEpoch(t, store)
	e.append(t, 10)
	e.uncheckpointed(t, second.newPublisher(e, store), &second, l, store, 10)
	if got := second.sum(); got != 10 {
		t.Fatalf("the second publisher was told of %d events, want the new epoch's 10 it published", got)
	}

	e.checkpointed(t, p1, l, 10)
	if got := first.sum(); got != 20 || first.found != 10 {
		t.Fatalf("the first publisher was told of %d events in all (%d found), want 20: 10 published in the old epoch, 10 found in the new", got, first.found)
	}
}

// TestFoundAfterPublishingInANewEpoch: a publisher told of 20 positions
// of one epoch publishes 5 events of the next (what it was told of starts
// again there, at 5); another publisher puts 5 more in the stream without
// a checkpoint; the first, run again, finds those 5.
func TestFoundAfterPublishingInANewEpoch(t *testing.T) {
	e := setup(t)
	e.append(t, 20)
	store := &failingSaves{Store: e.store}
	var first, second tally
	p1 := first.newPublisher(e, store)
	e.checkpointed(t, p1, e.lease(t), 20)

	l := e.newEpoch(t, store)
	e.append(t, 5)
	e.checkpointed(t, p1, l, 5)

	e.append(t, 5)
	e.uncheckpointed(t, second.newPublisher(e, store), &second, l, store, 10)

	e.checkpointed(t, p1, l, 10)
	if got := first.sum(); got != 30 || first.found != 5 {
		t.Fatalf("the first publisher was told of %d events in all (%d found), want 30: 20 and 5 published, 5 found", got, first.found)
	}
}

// TestFoundOnceWhileCheckpointsFail: a publisher that finds events while
// its checkpoint writes keep failing is told of them once, however many of
// its syncs find them again.
func TestFoundOnceWhileCheckpointsFail(t *testing.T) {
	e := setup(t)
	e.append(t, 10)
	store := &failingSaves{Store: e.store}
	var first, second tally
	e.uncheckpointed(t, first.newPublisher(e, store), &first, e.lease(t), store, 10)

	store.fail.Store(true)
	n := store.failed.Load()
	stop := run(t, second.newPublisher(e, store), e.lease(t))
	testutil.Eventually(t, "3 more failed checkpoint writes", 10*time.Second, 5*time.Millisecond, func() bool { return store.failed.Load() >= n+3 })
	store.fail.Store(false)
	e.waitCheckpoint(t, 10, 10*time.Second)
	stopped(t, stop)
	if got := second.sum(); got != 10 || second.found != 10 {
		t.Fatalf("the publisher taking over was told of %d events (%d found), want the 10 found, once", got, second.found)
	}
}
