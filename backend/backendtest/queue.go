package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// Outcome is what an append sent with AppendAsync got.
type Outcome struct {
	Res event.AppendResult
	Err error
}

// AppendAsync appends in a goroutine; the outcome arrives on the channel.
func AppendAsync(ctx context.Context, s backend.Store, boundary string, in []event.Input, cond *event.Condition) <-chan Outcome {
	out := make(chan Outcome, 1)
	go func() {
		res, err := s.Append(ctx, boundary, in, cond)
		out <- Outcome{res, err}
	}()
	return out
}

// Queue is what the cases of RunQueue need of a backend besides the
// Features: stores of a given group size, and a way to reopen a database.
type Queue struct {
	// Open returns a new, empty store whose groups hold at most
	// groupMaxEvents events (0: the backend's default, which must be 60
	// or more), and closes it at the end of the test.
	Open func(t *testing.T, groupMaxEvents int) backend.Store
	// Reopen opens the database of s, which the test closed, again, with
	// the default configuration.
	Reopen func(t *testing.T, s backend.Store) backend.Store
}

// RunQueue runs the cases of the append queue, which hold one group in
// flight (Features.Stall) and queue appends behind it: the queued appends
// commit in one group, a group stops at its size, a caller that gives up
// while queued writes nothing, Close refuses the queued appends and lets
// the group in flight commit, and an append larger than a group commits
// alone. Each case opens its own stores, so they run in parallel.
func RunQueue(t *testing.T, q Queue, f Features) {
	t.Helper()
	if q.Open == nil || q.Reopen == nil || f.Groups == nil || f.Stall == nil || f.Queued == nil || f.Closing == nil {
		t.Fatal("backendtest.RunQueue: Queue.Open, Queue.Reopen, Features.Groups, Features.Stall, Features.Queued and Features.Closing are required")
	}
	t.Run("GroupCommit", func(t *testing.T) { t.Parallel(); testQueuedGroupCommit(t, q, f) })
	t.Run("GroupMaxEvents", func(t *testing.T) { t.Parallel(); testGroupMaxEvents(t, q, f) })
	t.Run("CancelledWhileQueuedWritesNothing", func(t *testing.T) { t.Parallel(); testCancelledWhileQueued(t, q, f) })
	t.Run("CloseWithQueuedAppends", func(t *testing.T) { t.Parallel(); testCloseWithQueued(t, q, f) })
	t.Run("LargeAppendCrossesGroups", func(t *testing.T) { t.Parallel(); testLargeAppend(t, q) })
}

// Waits of the queue cases: a loaded machine may take seconds to queue a
// caller; a queued caller shows within a few milliseconds otherwise.
const (
	queueWait = 20 * time.Second
	queueTick = 2 * time.Millisecond
)

// waitQueued waits until n append requests wait in s's queue.
func waitQueued(t *testing.T, f Features, s backend.Store, what string, n int) {
	t.Helper()
	testutil.Eventually(t, what, queueWait, queueTick, func() bool { return f.Queued(s) == int64(n) })
}

// groupsBehindStall stalls a group on boundary (Features.Stall), queues
// callers appends of n events each behind it, releases the stall, and
// returns how many groups (transactions) the queued appends took once all
// succeeded.
func groupsBehindStall(t *testing.T, f Features, s backend.Store, boundary string, callers, n int) int64 {
	t.Helper()
	release, first := f.Stall(t, s, boundary, n)
	var outs []<-chan Outcome
	for range callers {
		outs = append(outs, AppendAsync(context.Background(), s, boundary, batch(t, boundary, n, "order.placed"), nil))
	}
	waitQueued(t, f, s, "callers queued", callers)
	before := f.Groups(s)
	release()
	if o := <-first; o.Err != nil {
		t.Fatal(o.Err)
	}
	for _, out := range outs {
		if o := <-out; o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	return f.Groups(s) - before
}

// testQueuedGroupCommit: appends that wait while a group is in flight
// commit together in the next group, one transaction for all of them.
func testQueuedGroupCommit(t *testing.T, q Queue, f Features) {
	s := q.Open(t, 0)
	Create(t, s, "orders")
	const callers = 20
	if n := groupsBehindStall(t, f, s, "orders", callers, 3); n != 1 {
		t.Fatalf("the %d waiting appends took %d transactions, want 1", callers, n)
	}
	if h := head(t, s, "orders"); h != 3*(callers+1) {
		t.Fatalf("head = %d, want %d", h, 3*(callers+1))
	}
}

// testGroupMaxEvents: a group stops at the store's group size; the request
// that does not fit starts the next group.
func testGroupMaxEvents(t *testing.T, q Queue, f Features) {
	s := q.Open(t, 10)
	Create(t, s, "orders")
	// 12 requests of 4 events, at most 2 per group of 10 events: 6 groups.
	const callers = 12
	if n := groupsBehindStall(t, f, s, "orders", callers, 4); n != 6 {
		t.Fatalf("%d transactions, want 6", n)
	}
	WantStored(t, s, "orders", 4*(callers+1), "")
}

// testCancelledWhileQueued: a caller that gives up while its request waits
// gets ctx.Err() and nothing of it is written.
func testCancelledWhileQueued(t *testing.T, q Queue, f Features) {
	s := q.Open(t, 0)
	Create(t, s, "orders")
	release, first := f.Stall(t, s, "orders", 2)
	const callers = 5
	ctx, cancel := context.WithCancel(t.Context())
	var outs []<-chan Outcome
	for range callers {
		outs = append(outs, AppendAsync(ctx, s, "orders", batch(t, "orders", 2, "order.placed"), nil))
	}
	waitQueued(t, f, s, "callers queued", callers)
	cancel()
	for _, out := range outs {
		if o := <-out; !errors.Is(o.Err, context.Canceled) {
			t.Fatalf("Append cancelled while queued: %v, want context.Canceled", o.Err)
		}
	}
	release()
	if o := <-first; o.Err != nil {
		t.Fatalf("the append in flight: %v", o.Err)
	}
	if res := mustAppend(t, s, "orders", batch(t, "orders", 1, "order.placed"), nil); res.First != 3 {
		t.Fatalf("the next append got position %d, want 3: a cancelled append wrote something", res.First)
	}
}

// testCloseWithQueued: the group in flight commits, the queued appends get
// ErrClosed and are not written.
func testCloseWithQueued(t *testing.T, q Queue, f Features) {
	s := q.Open(t, 0)
	Create(t, s, "orders")
	release, first := f.Stall(t, s, "orders", 2)
	const callers = 20
	type queued struct {
		in  []event.Input
		out <-chan Outcome
	}
	var qs []queued
	for range callers {
		in := batch(t, "orders", 2, "order.placed")
		qs = append(qs, queued{in, AppendAsync(context.Background(), s, "orders", in, nil)})
	}
	waitQueued(t, f, s, "callers queued", callers)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close waits for the group in flight, which waits for what Stall
	// holds; the queued callers are refused at once.
	testutil.Eventually(t, "queued callers refused", queueWait, queueTick, func() bool { return f.Closing(s) && f.Queued(s) == 0 })
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if o := <-first; o.Err != nil {
		t.Fatalf("the append in flight during Close: %v, want it committed", o.Err)
	}
	refused := map[string]bool{}
	for _, q := range qs {
		o := <-q.out
		if !errors.Is(o.Err, event.ErrClosed) {
			t.Fatalf("a queued Append during Close: %v, want ErrClosed", o.Err)
		}
		refused[q.in[0].ID], refused[q.in[1].ID] = true, true
	}
	events := WantStored(t, q.Reopen(t, s), "orders", 2, ": the 2 of the append in flight")
	for _, e := range events {
		if refused[e.ID] {
			t.Fatalf("id %s was refused with ErrClosed but is stored", e.ID)
		}
	}
}

// testLargeAppend: an append larger than a group (and than one statement
// of a backend binds) still commits, alone, and its retry is recognised;
// a retry with one event changed is a conflict naming that event.
func testLargeAppend(t *testing.T, q Queue) {
	s := q.Open(t, 100)
	Create(t, s, "orders")
	in := batch(t, "orders", 1234, "order.placed")
	res, err := s.Append(t.Context(), "orders", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.First != 1 || res.Last != 1234 {
		t.Fatalf("Append = %d..%d, want 1..1234", res.First, res.Last)
	}
	again, err := s.Append(t.Context(), "orders", in, nil)
	if err != nil || again != res {
		t.Fatalf("retry = %+v, %v; want %+v", again, err, res)
	}
	in[1000].Data = []byte(`{"changed":true}`)
	if _, err := s.Append(t.Context(), "orders", in, nil); !errors.Is(err, event.ErrConflict) ||
		!strings.Contains(err.Error(), "events[1000].id "+in[1000].ID+" is already stored at position 1001 with other content") {
		t.Fatalf("retry with event 1000 changed: %v, want a conflict naming events[1000] and position 1001", err)
	}
}
