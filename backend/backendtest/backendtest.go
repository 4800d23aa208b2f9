// Package backendtest is the conformance suite of the store seam: every
// promise of package backend (and of docs/design.md §2–§4, §9) as a test that a
// backend runs against its real database with RunAll (Run in several
// group settings, and RunQueue: the append queue, with a group held in
// flight) and NoGoroutineLeak; BenchAppend,
// BenchParallel and BenchReadPages are the benchmarks both backends report,
// and Create, Prepared, QueryItem, AppendAsync, ReadAll, CheckDense and
// WantStored serve a backend's own tests.
// It is orisun's machinery, not for import by applications: its API may
// change without notice, and such a change is not a breaking change of
// orisun.
//
// Tests that guard an invariant carry its id (I1, I3, I6) in their name.
// Nothing here sleeps to wait for a result, except where the promise is
// about time itself (lease expiry), and even then the test polls with a
// deadline.
package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// Features are the test hooks a backend gives the suite besides its stores:
// what the seam cannot show from outside. Run requires HoldGroups, Groups
// and Edit; RunQueue requires Groups, Stall, Queued and Closing.
type Features struct {
	// HoldGroups makes s begin no group commit of boundary until release
	// is called; queued reports how many append requests wait meanwhile.
	// The requests waiting at release commit in one group transaction (the
	// suite keeps them within the store's group size), in their order of
	// arrival. It lets the suite put requests into one group without
	// hoping for the timing.
	HoldGroups func(s backend.Store, boundary string) (queued func() int, release func())
	// Groups counts the group transactions s has begun.
	Groups func(s backend.Store) int64
	// Stall sends one append of n events to boundary and returns once a
	// group took it and waits, on something the test holds, to commit:
	// every append sent later waits in s's queue, deterministically.
	// release lets the group go on; first reports the stalled append's
	// outcome.
	Stall func(t *testing.T, s backend.Store, boundary string, n int) (release func(), first <-chan Outcome)
	// Queued counts the append requests waiting in s's queue.
	Queued func(s backend.Store) int64
	// Closing reports whether a Close of s has begun.
	Closing func(s backend.Store) bool
	// Edit changes stored rows behind s's back (testBadRows); Run
	// requires its Delete and Move.
	Edit *Edit
}

// Run runs the whole suite. open must return a new, empty store of the
// backend under test and register its Close with t.Cleanup; every subtest
// opens its own store, so subtests run in parallel. Closing a store twice
// must be safe: a subtest may close it early.
func Run(t *testing.T, open func(t *testing.T) backend.Store, f Features) {
	t.Helper()
	if f.HoldGroups == nil || f.Groups == nil || f.Edit == nil || f.Edit.Delete == nil || f.Edit.Move == nil {
		t.Fatal("backendtest.Run: Features.HoldGroups, Features.Groups, Features.Edit.Delete and Features.Edit.Move are required")
	}
	t.Run("Boundaries", func(t *testing.T) { t.Parallel(); testBoundaries(t, open) })
	t.Run("Append", func(t *testing.T) { t.Parallel(); testAppend(t, open) })
	t.Run("Idempotency", func(t *testing.T) { t.Parallel(); testIdempotency(t, open) })
	t.Run("GroupCommit", func(t *testing.T) { t.Parallel(); testGroupCommit(t, open) })
	t.Run("Conditions", func(t *testing.T) { t.Parallel(); testConditions(t, open) })
	t.Run("SameGroup", func(t *testing.T) { t.Parallel(); testSameGroup(t, open, f) })
	t.Run("Latest", func(t *testing.T) { t.Parallel(); testLatest(t, open) })
	t.Run("Decisions", func(t *testing.T) { t.Parallel(); testDecisions(t, open) })
	t.Run("Read", func(t *testing.T) { t.Parallel(); testRead(t, open) })
	t.Run("ReadBackward", func(t *testing.T) { t.Parallel(); testReadBackward(t, open, f.Edit) })
	t.Run("DuplicateTag", func(t *testing.T) { t.Parallel(); testDuplicateTag(t, open) })
	t.Run("Checkpoints", func(t *testing.T) { t.Parallel(); testCheckpoints(t, open) })
	t.Run("Leases", func(t *testing.T) { t.Parallel(); testLeases(t, open) })
	t.Run("Notifier", func(t *testing.T) { t.Parallel(); testNotifier(t, open) })
	t.Run("States", func(t *testing.T) { t.Parallel(); testStates(t, open) })
	t.Run("Heads", func(t *testing.T) { t.Parallel(); testHeads(t, open) })
	t.Run("Closed", func(t *testing.T) { t.Parallel(); testClosed(t, open) })
	t.Run("BadRows", func(t *testing.T) { t.Parallel(); testBadRows(t, open, f.Edit) })
}

// Groups are the group commit settings a store of RunAll is opened with.
type Groups struct {
	// Delay is how long a group waits for requests to join it (0: the
	// backend's default).
	Delay time.Duration
	// MaxEvents bounds the events of a group (0: the backend's default,
	// which must be 60 or more).
	MaxEvents int
}

// The group settings RunAll runs Run with besides the defaults: groups
// that wait for requests to join them, and groups of at most 3 events
// (requests carried over from one group to the next all the time).
var (
	GroupDelay  = Groups{Delay: 200 * time.Microsecond}
	SmallGroups = Groups{MaxEvents: 3}
)

// RunAll runs the suite as every backend runs it: Run with stores of the
// defaults, of GroupDelay and of SmallGroups, then RunQueue. open returns
// a new, empty store with g (as Run's open and Queue.Open: it closes the
// store at the end of the test); reopen is Queue.Reopen.
func RunAll(t *testing.T, open func(tb testing.TB, g Groups) backend.Store, reopen func(t *testing.T, s backend.Store) backend.Store, f Features) {
	t.Helper()
	for _, c := range []struct {
		name string
		g    Groups
	}{{"Defaults", Groups{}}, {"GroupDelay", GroupDelay}, {"SmallGroups", SmallGroups}} {
		t.Run(c.name, func(t *testing.T) {
			Run(t, func(t *testing.T) backend.Store { return open(t, c.g) }, f)
		})
	}
	t.Run("Queue", func(t *testing.T) {
		RunQueue(t, Queue{
			Open: func(t *testing.T, groupMaxEvents int) backend.Store {
				return open(t, Groups{MaxEvents: groupMaxEvents})
			},
			Reopen: reopen,
		}, f)
	})
}

// Closed closes s when the test ends, failing the test if Close fails:
// for a backend's setup of the stores it gives the suite.
func Closed(t testing.TB, s backend.Store) {
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// setup opens a store and creates the named boundaries.
func setup(t *testing.T, open func(t *testing.T) backend.Store, boundaries ...string) backend.Store {
	t.Helper()
	s := open(t)
	Create(t, s, boundaries...)
	return s
}

// Create creates the named boundaries in s.
func Create(t testing.TB, s backend.Store, boundaries ...string) {
	t.Helper()
	for _, name := range boundaries {
		if _, _, err := s.CreateBoundary(context.Background(), name); err != nil {
			t.Fatalf("CreateBoundary(%q): %v", name, err)
		}
	}
}

// Notified returns a callback for OnAppend or OnLeaseReleased that sends
// the boundary it is called with on the channel it returns, which holds n
// (a full channel drops it: a callback must not block).
func Notified(n int) (<-chan string, func(boundary string)) {
	ch := make(chan string, n)
	return ch, func(boundary string) {
		select {
		case ch <- boundary:
		default:
		}
	}
}

// WantNotified waits up to timeout for the next boundary on ch (from
// Notified) and fails the test unless it comes and is want; what names
// the callback in the failure.
func WantNotified(t testing.TB, ch <-chan string, want string, timeout time.Duration, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s(%q), want %q", what, got, want)
		}
	case <-time.After(timeout):
		t.Fatalf("%s was not called for %q within %s", what, want, timeout)
	}
}

// Fill appends n events to boundary, 1,000 an append: event k (from 0) is
// ev(k). It is how a backend's tests build a large boundary (the query
// plan tests, the read benchmarks); each backend chooses its events.
func Fill(t testing.TB, s backend.Store, boundary string, n int, ev func(k int) event.Input) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		in := make([]event.Input, min(1000, n-start))
		for i := range in {
			in[i] = ev(start + i)
		}
		if _, err := s.Append(context.Background(), boundary, in, nil); err != nil {
			t.Fatalf("append events %d to %d of %d to %q: %v", start, start+len(in)-1, n, boundary, err)
		}
	}
}

// QueryItem is the query of one item, of the types and tags given (nil
// types: any type): the shape of most queries of the suite and of a
// backend's query plan tests.
func QueryItem(types []string, tags ...string) *event.Query {
	return &event.Query{Items: []event.QueryItem{{Types: types, Tags: tags}}}
}

// ev is a raw input; prep normalises inputs the way the core does before an
// append (event.Prepare), so the suite appends what a backend really gets.
func ev(typ string, tags ...string) event.Input {
	return event.Input{Type: typ, Data: json.RawMessage(`{"type": "` + typ + `"}`), Tags: tags}
}

func prep(t testing.TB, boundary string, in ...event.Input) []event.Input {
	t.Helper()
	out, err := event.Prepare(boundary, in, event.Limits{})
	if err != nil {
		t.Fatalf("event.Prepare: %v", err)
	}
	return out
}

// Prepared returns n prepared events of type test.event for boundary, with
// the data {"i":0} to {"i":n-1}: what a backend's own tests append where
// the events' content does not matter.
func Prepared(t testing.TB, boundary string, n int) []event.Input {
	t.Helper()
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{Type: "test.event", Data: []byte(`{"i":` + strconv.Itoa(i) + `}`)}
	}
	out, err := event.Prepare(boundary, in, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// batch returns n prepared events of one type.
func batch(t testing.TB, boundary string, n int, typ string, tags ...string) []event.Input {
	t.Helper()
	out, err := mkBatch(boundary, n, typ, tags...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mkBatch is batch for goroutines, which must not call t.Fatal.
func mkBatch(boundary string, n int, typ string, tags ...string) ([]event.Input, error) {
	in := make([]event.Input, n)
	for i := range in {
		in[i] = ev(typ, tags...)
	}
	out, err := event.Prepare(boundary, in, event.Limits{})
	if err != nil {
		return nil, fmt.Errorf("event.Prepare: %w", err)
	}
	return out, nil
}

func mustAppend(t testing.TB, s backend.Store, boundary string, events []event.Input, cond *event.Condition) event.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), boundary, events, cond)
	if err != nil {
		t.Fatalf("Append(%q, %d events): %v", boundary, len(events), err)
	}
	if want := res.First + uint64(len(events)) - 1; res.Last != want {
		t.Fatalf("Append(%q, %d events) = %d..%d: the range does not hold the batch", boundary, len(events), res.First, res.Last)
	}
	return res
}

// readAll reads every event of the boundary matching q, page by page.
func readAll(t testing.TB, s backend.Store, boundary string, q *event.Query) (string, []event.Event) {
	t.Helper()
	var all []event.Event
	var epoch string
	after := uint64(0)
	for {
		e, page, err := s.Read(context.Background(), boundary, after, 1000, q)
		if err != nil {
			t.Fatalf("Read(%q, after %d): %v", boundary, after, err)
		}
		epoch = e
		if len(page) == 0 {
			return epoch, all
		}
		all = append(all, page...)
		after = page[len(page)-1].Position
	}
}

// mustBoundary reads boundary with its head, failing the test if it
// cannot.
func mustBoundary(t testing.TB, s backend.Store, boundary string) event.Boundary {
	t.Helper()
	b, err := s.Boundary(context.Background(), boundary)
	if err != nil {
		t.Fatalf("Boundary(%q): %v", boundary, err)
	}
	return b
}

func head(t testing.TB, s backend.Store, boundary string) uint64 {
	t.Helper()
	return mustBoundary(t, s, boundary).Head
}

func checkpoint(t testing.TB, s backend.Store, boundary string) uint64 {
	t.Helper()
	cp, err := s.Checkpoint(context.Background(), boundary)
	if err != nil {
		t.Fatalf("Checkpoint(%q): %v", boundary, err)
	}
	return cp
}

// ReadAll returns every event of the boundary, read page by page.
func ReadAll(t testing.TB, s backend.Store, boundary string) []event.Event {
	t.Helper()
	_, events := readAll(t, s, boundary, nil)
	return events
}

// WantStored reads every event of the boundary and fails unless they are
// dense (CheckDense) and want many; why says what a wrong count means.
func WantStored(t testing.TB, s backend.Store, boundary string, want int, why string) []event.Event {
	t.Helper()
	_, events := readAll(t, s, boundary, nil)
	CheckDense(t, events)
	if len(events) != want {
		t.Fatalf("%q holds %d events, want %d%s", boundary, len(events), want, why)
	}
	return events
}

// CheckDense fails unless the events are at positions 1..n in order, each
// id once (I1).
func CheckDense(t testing.TB, events []event.Event) {
	t.Helper()
	seen := make(map[string]uint64, len(events))
	for i, e := range events {
		if e.Position != uint64(i+1) {
			t.Fatalf("I1: event %d of the boundary is at position %d, want %d (positions must be 1, 2, 3, … without gaps)",
				i, e.Position, i+1)
		}
		if p, dup := seen[e.ID]; dup {
			t.Fatalf("id %s is stored twice, at positions %d and %d", e.ID, p, e.Position)
		}
		seen[e.ID] = e.Position
	}
}

func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want one matching %v", what, err, target)
	}
}

// wantRetriesConflict sends each retry to orders, where it overlaps a
// stored append without being it, and wants event.ErrConflict for each and
// the head still at want: a conflicting retry writes nothing.
func wantRetriesConflict(t testing.TB, s backend.Store, retries map[string][]event.Input, want uint64) {
	t.Helper()
	for name, retry := range retries {
		_, err := s.Append(context.Background(), "orders", retry, nil)
		wantErr(t, "retry "+name, err, event.ErrConflict)
	}
	if h := head(t, s, "orders"); h != want {
		t.Fatalf("head = %d, want %d: a conflicting retry writes nothing", h, want)
	}
}

func ids(events []event.Input) []string {
	out := make([]string, len(events))
	for i := range events {
		out[i] = events[i].ID
	}
	return out
}

func positions(events []event.Event) []uint64 {
	out := make([]uint64, len(events))
	for i := range events {
		out[i] = events[i].Position
	}
	return out
}
