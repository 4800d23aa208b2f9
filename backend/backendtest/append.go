package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

func testAppend(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("PositionsStartAtOneAndAreDense_I1", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders", "billing")
		want := uint64(1)
		for _, n := range []int{1, 3, 1, 7, 2} {
			res := mustAppend(t, s, "orders", batch(t, "orders", n, "order.placed"), nil)
			if res.First != want || res.Last != want+uint64(n)-1 {
				t.Fatalf("I1: append of %d events = %d..%d, want %d..%d", n, res.First, res.Last, want, want+uint64(n)-1)
			}
			want += uint64(n)
		}
		// Boundaries are independent logs.
		if res := mustAppend(t, s, "billing", batch(t, "billing", 2, "invoice.sent"), nil); res.First != 1 || res.Last != 2 {
			t.Fatalf("I1: the first append to another boundary = %d..%d, want 1..2", res.First, res.Last)
		}
		if h := head(t, s, "orders"); h != 14 {
			t.Fatalf("head = %d, want 14", h)
		}
		_, events := readAll(t, s, "orders", nil)
		CheckDense(t, events)
	})

	t.Run("StoredEventsRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		b := mustBoundary(t, s, "orders")
		in := prep(t, "orders",
			event.Input{Type: "order.placed", Data: json.RawMessage(`{ "total": 12.5, "items": [1, 2] }`),
				Metadata: json.RawMessage(`{"trace": "abc"}`), Tags: []string{"order:1", "customer:7"}},
			event.Input{Type: "order.noted", Data: json.RawMessage(`"just a string"`)},
		)
		before := time.Now().Add(-time.Minute)
		res := mustAppend(t, s, "orders", in, nil)
		after := time.Now().Add(time.Minute)
		if res.Epoch != b.Epoch {
			t.Fatalf("Append epoch = %q, want the boundary's %q", res.Epoch, b.Epoch)
		}
		epoch, got := readAll(t, s, "orders", nil)
		if epoch != b.Epoch {
			t.Fatalf("Read epoch = %q, want %q", epoch, b.Epoch)
		}
		if len(got) != 2 {
			t.Fatalf("Read returned %d events, want 2", len(got))
		}
		for i, e := range got {
			if !in[i].Equal(&e) {
				t.Fatalf("event %d read back as %+v, want the content of %+v", i, e, in[i])
			}
			if e.Boundary != "orders" || e.Epoch != b.Epoch || e.Position != uint64(i+1) {
				t.Fatalf("event %d: boundary %q epoch %q position %d, want orders %s %d", i, e.Boundary, e.Epoch, e.Position, b.Epoch, i+1)
			}
			if e.Time.Location() != time.UTC || e.Time.Before(before) || e.Time.After(after) {
				t.Fatalf("event %d: time %v, want the commit time in UTC", i, e.Time)
			}
		}
		if got[1].Tags == nil || len(got[1].Tags) != 0 {
			t.Fatalf("event without tags read back with tags %#v, want an empty, non-nil slice", got[1].Tags)
		}
		if got[1].Metadata != nil {
			t.Fatalf("event without metadata read back with metadata %q, want nil", got[1].Metadata)
		}
		if string(got[0].Data) != `{"total":12.5,"items":[1,2]}` {
			t.Fatalf("data read back as %s", got[0].Data)
		}
	})

	t.Run("AppendIsAtomic", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		stored := mustAppend(t, s, "orders", batch(t, "orders", 1, "order.placed"), nil)
		_, events := readAll(t, s, "orders", nil)
		// A batch whose last event reuses a stored id with other content:
		// the conflict fails the whole batch.
		in := batch(t, "orders", 5, "order.placed")
		clash := events[0]
		in[4] = prep(t, "orders", event.Input{ID: clash.ID, Type: "other.type", Data: json.RawMessage(`{}`)})[0]
		_, err := s.Append(t.Context(), "orders", in, nil)
		wantErr(t, "Append of a batch with a conflicting id", err, event.ErrConflict)
		_, after := readAll(t, s, "orders", nil)
		if len(after) != 1 || head(t, s, "orders") != stored.Last {
			t.Fatalf("a failed append wrote %d events; an append is all or nothing", len(after)-1)
		}
	})

	t.Run("DensePositionsUnderConcurrentAppenders_I1", func(t *testing.T) {
		t.Parallel()
		testDenseConcurrent(t, open)
	})
}

// testDenseConcurrent: 16 appenders append random batches to two boundaries
// while a reader follows both and fails on any gap; at the end each boundary
// holds exactly 1..N, each appended id once, at the position its append
// returned (I1).
func testDenseConcurrent(t *testing.T, open func(t *testing.T) backend.Store) {
	const (
		appenders   = 16
		perAppender = 25
		maxBatch    = 20
	)
	names := []string{"dense_a", "dense_b"}
	s := setup(t, open, names...)
	ctx := t.Context()

	var mu sync.Mutex
	placed := map[string]map[string]uint64{names[0]: {}, names[1]: {}} // boundary → id → position
	var wg sync.WaitGroup
	errs := make(chan error, appenders+1)
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range perAppender {
				b := names[rng.IntN(len(names))]
				in, err := mkBatch(b, 1+rng.IntN(maxBatch), "dense.appended")
				if err != nil {
					errs <- err
					return
				}
				res, err := s.Append(ctx, b, in, nil)
				if err != nil {
					errs <- fmt.Errorf("appender %d: Append(%q): %w", w, b, err)
					return
				}
				if res.Last-res.First+1 != uint64(len(in)) {
					errs <- fmt.Errorf("appender %d: %d events got positions %d..%d", w, len(in), res.First, res.Last)
					return
				}
				mu.Lock()
				for i := range in {
					placed[b][in[i].ID] = res.First + uint64(i)
				}
				mu.Unlock()
			}
		}()
	}

	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		last := map[string]uint64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, b := range names {
				_, page, err := s.Read(ctx, b, last[b], 500, nil)
				if err != nil {
					errs <- fmt.Errorf("reader: Read(%q, after %d): %w", b, last[b], err)
					return
				}
				for _, e := range page {
					if e.Position != last[b]+1 {
						errs <- fmt.Errorf("I1: reader saw position %d right after %d in %q: a gap was visible", e.Position, last[b], b)
						return
					}
					last[b] = e.Position
				}
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(stop)
	<-readerDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for _, b := range names {
		events := WantStored(t, s, b, len(placed[b]), ": as many as were appended")
		for _, e := range events {
			p, ok := placed[b][e.ID]
			if !ok {
				t.Fatalf("%q holds id %s that no appender appended", b, e.ID)
			}
			if p != e.Position {
				t.Fatalf("id %s: Append returned position %d, it is stored at %d", e.ID, p, e.Position)
			}
		}
		if h := head(t, s, b); h != uint64(len(events)) {
			t.Fatalf("head of %q = %d, want %d", b, h, len(events))
		}
	}
}

func testIdempotency(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("RetrySameContentReturnsStoredPositions", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		mustAppend(t, s, "orders", batch(t, "orders", 2, "order.placed"), nil)
		in := batch(t, "orders", 3, "order.placed", "order:9")
		first := mustAppend(t, s, "orders", in, nil)
		mustAppend(t, s, "orders", batch(t, "orders", 1, "order.placed"), nil)
		// The retry also works when it is not the last append.
		again := mustAppend(t, s, "orders", in, nil)
		if again != first {
			t.Fatalf("retry = %+v, want the stored %+v", again, first)
		}
		if h := head(t, s, "orders"); h != 6 {
			t.Fatalf("head = %d after a retry, want 6: a retry writes nothing", h)
		}
		// A retry of a tail of the append is the same events at the same
		// positions.
		one := mustAppend(t, s, "orders", in[1:2], nil)
		if one.First != first.First+1 || one.Last != first.First+1 {
			t.Fatalf("retry of the middle event = %d..%d, want %d", one.First, one.Last, first.First+1)
		}
	})

	t.Run("RetryWithOtherContentIsConflict", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		in := prep(t, "orders", ev("order.placed", "a"), ev("order.placed", "b"))
		mustAppend(t, s, "orders", in, nil)
		variants := map[string]func(e *event.Input){
			"type":     func(e *event.Input) { e.Type = "order.cancelled" },
			"data":     func(e *event.Input) { e.Data = json.RawMessage(`{"other":true}`) },
			"metadata": func(e *event.Input) { e.Metadata = json.RawMessage(`{"m":1}`) },
			"tags":     func(e *event.Input) { e.Tags = []string{"b", "c"} },
			"no tags":  func(e *event.Input) { e.Tags = []string{} },
		}
		retries := map[string][]event.Input{}
		for name, change := range variants {
			retry := []event.Input{in[0], in[1]}
			retry[1].Tags = append([]string(nil), in[1].Tags...)
			change(&retry[1])
			retries["with other "+name] = retry
		}
		wantRetriesConflict(t, s, retries, 2)
	})

	t.Run("RetryAcrossHTMLEscaping", func(t *testing.T) {
		t.Parallel()
		// Stored by a Go client of before issue 22, which HTML-escaped
		// data and metadata; sent again as the bytes themselves (any
		// client now): the same event (docs/design.md §3).
		s := setup(t, open, "orders")
		e := ev("order.placed")
		e.Data, e.Metadata = json.RawMessage(`{"note":"\u003cb\u003e \u0026"}`), json.RawMessage(`["\u003e"]`)
		in := prep(t, "orders", e)
		first := mustAppend(t, s, "orders", in, nil)
		retry := []event.Input{in[0]}
		retry[0].Data, retry[0].Metadata = json.RawMessage(`{"note":"<b> &"}`), json.RawMessage(`[">"]`)
		again, err := s.Append(t.Context(), "orders", retry, nil)
		if err != nil || again != first {
			t.Fatalf("retry without the escapes = %+v, %v; want the stored %+v", again, err, first)
		}
		retry[0].Data = json.RawMessage(`{"note":"<i> &"}`)
		_, err = s.Append(t.Context(), "orders", retry, nil)
		wantErr(t, "retry with other data", err, event.ErrConflict)
		if h := head(t, s, "orders"); h != 1 {
			t.Fatalf("head = %d, want 1: the retries write nothing", h)
		}
	})

	t.Run("PartialOverlapIsConflict", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		in := batch(t, "orders", 3, "order.placed")
		mustAppend(t, s, "orders", in, nil)
		fresh := batch(t, "orders", 1, "order.placed")
		wantRetriesConflict(t, s, map[string][]event.Input{
			"stored then new":  {in[0], in[1], in[2], fresh[0]},
			"new then stored":  {fresh[0], in[0]},
			"stored in middle": {in[0], fresh[0], in[2]},
			"reordered":        {in[1], in[0], in[2]},
			"with a gap":       {in[0], in[2]},
		}, 3)
	})

	t.Run("RetryIgnoresConditionOfStoredAppend", func(t *testing.T) {
		t.Parallel()
		// The first append passed its condition; an event matching it came
		// later. The retry is the same append: it gets the stored positions,
		// not a condition failure.
		s := setup(t, open, "orders")
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"order:1"}}}}, After: 0}
		in := batch(t, "orders", 1, "order.placed", "order:1")
		first := mustAppend(t, s, "orders", in, cond)
		mustAppend(t, s, "orders", batch(t, "orders", 1, "order.shipped", "order:1"), nil)
		again, err := s.Append(t.Context(), "orders", in, cond)
		if err != nil || again != first {
			t.Fatalf("retry of a conditional append = %+v, %v; want the stored %+v", again, err, first)
		}
	})

	t.Run("RetryInSameGroup", func(t *testing.T) {
		t.Parallel()
		// Copies of one request sent at once may land in one group: the
		// later copies must see the first one's events (same positions,
		// written once).
		s := setup(t, open, "orders")
		const rounds, copies = 20, 4
		for round := range rounds {
			in := batch(t, "orders", 3, "order.placed")
			results := make([]event.AppendResult, copies)
			errs := make([]error, copies)
			testutil.AtOnce(copies, func(c int) {
				results[c], errs[c] = s.Append(context.Background(), "orders", in, nil)
			})
			for c := range copies {
				if errs[c] != nil {
					t.Fatalf("round %d, copy %d: %v", round, c, errs[c])
				}
				if results[c] != results[0] {
					t.Fatalf("round %d: copies got %+v and %+v; a retry gets the stored positions", round, results[0], results[c])
				}
			}
		}
		WantStored(t, s, "orders", rounds*3, ": each request written once")
	})
}

func testGroupCommit(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("FailureIsolatedInGroup", func(t *testing.T) {
		t.Parallel()
		// Concurrent appends that may share a transaction: a missing
		// boundary, an id conflict or a failed condition fails that request
		// alone.
		s := setup(t, open, "orders")
		seed := mustAppend(t, s, "orders", batch(t, "orders", 1, "order.seed", "seed"), nil)
		_, seeded := readAll(t, s, "orders", nil)
		const rounds, requests = 5, 20
		var okIDs []string
		var failedIDs []string
		for round := range rounds {
			type outcome struct {
				kind string
				b    string
				in   []event.Input
				cond *event.Condition
				res  event.AppendResult
				err  error
			}
			out := make([]outcome, requests)
			for i := range out {
				o := &out[i]
				switch i % 4 {
				case 0:
					o.kind, o.b = "missing boundary", "missing"
					o.in = batch(t, o.b, 2, "order.placed")
				case 1:
					o.kind, o.b = "id conflict", "orders"
					o.in = append(batch(t, o.b, 1, "order.placed"),
						prep(t, o.b, event.Input{ID: seeded[0].ID, Type: "not.the.seed", Data: json.RawMessage(`1`)})...)
				case 2:
					o.kind, o.b = "failed condition", "orders"
					o.in = batch(t, o.b, 2, "order.placed")
					o.cond = &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"seed"}}}}, After: 0}
				default:
					o.kind, o.b = "valid", "orders"
					o.in = batch(t, o.b, 2, "order.placed")
				}
			}
			testutil.AtOnce(requests, func(i int) {
				o := &out[i]
				o.res, o.err = s.Append(context.Background(), o.b, o.in, o.cond)
			})
			for i, o := range out {
				var target error
				switch o.kind {
				case "missing boundary":
					target = event.ErrNotFound
				case "id conflict":
					target = event.ErrConflict
				case "failed condition":
					var ce *event.ConflictError
					if !errors.As(o.err, &ce) || ce.Position != seed.First || ce.After != 0 || ce.Boundary != "orders" {
						t.Fatalf("round %d request %d (%s): err = %v, want a *event.ConflictError at position %d",
							round, i, o.kind, o.err, seed.First)
					}
				case "valid":
					if o.err != nil {
						t.Fatalf("round %d request %d (valid): %v; another request's failure must not fail it", round, i, o.err)
					}
					okIDs = append(okIDs, ids(o.in)...)
					continue
				}
				if target != nil && !errors.Is(o.err, target) {
					t.Fatalf("round %d request %d (%s): err = %v, want %v", round, i, o.kind, o.err, target)
				}
				for _, e := range o.in {
					if e.ID != seeded[0].ID {
						failedIDs = append(failedIDs, e.ID)
					}
				}
			}
		}
		_, events := readAll(t, s, "orders", nil)
		CheckDense(t, events)
		stored := map[string]bool{}
		for _, e := range events {
			stored[e.ID] = true
		}
		if len(events) != 1+len(okIDs) {
			t.Fatalf("%d events stored, want the seed and the %d events of the valid requests", len(events), len(okIDs))
		}
		for _, id := range okIDs {
			if !stored[id] {
				t.Fatalf("id %s of a valid request is not stored", id)
			}
		}
		for _, id := range failedIDs {
			if stored[id] {
				t.Fatalf("id %s of a failed request is stored", id)
			}
		}
	})
}
