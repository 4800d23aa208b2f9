package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// testReadBackward: ReadBackward (backend.BackwardReader) returns the
// events below a position, newest first, as many as the limit, matching a
// query as Read matches it: the reverse of a forward read, page by page;
// only committed events up to the head, never a row beyond it; the same
// errors as Read for a bad limit, an unknown boundary, a closed store and
// a bad row.
func testReadBackward(t *testing.T, open func(t *testing.T) backend.Store, ed *Edit) {
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		b := mustBoundary(t, s, "b")
		for _, before := range []uint64{0, 1, 2, math.MaxUint64} {
			epoch, events, err := s.ReadBackward(t.Context(), "b", before, 10, nil)
			if err != nil || len(events) != 0 || epoch != b.Epoch {
				t.Fatalf("ReadBackward(empty boundary, before %d) = %q, %v, %v; want the epoch %q and no events", before, epoch, positions(events), err, b.Epoch)
			}
		}
	})

	t.Run("Positions", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		mustAppend(t, s, "b", batch(t, "b", 25, "t"), nil)
		desc := func(from, to uint64) []uint64 {
			out := []uint64{}
			for p := from; p >= to && p > 0; p-- {
				out = append(out, p)
			}
			return out
		}
		for _, c := range []struct {
			before uint64
			limit  int
			want   []uint64
		}{
			{0, 10, desc(25, 16)},    // from the head
			{16, 10, desc(15, 6)},    // the next page
			{6, 10, desc(5, 1)},      // the last page, short
			{1, 10, desc(0, 1)},      // nothing is before position 1
			{2, 10, desc(1, 1)},      // only position 1
			{25, 1, desc(24, 24)},    // the limit
			{26, 3, desc(25, 23)},    // just past the head
			{27, 3, desc(25, 23)},    // beyond the head: from the head
			{1000, 100, desc(25, 1)}, // beyond the head, every event
			{math.MaxInt64, 2, desc(25, 24)},
			{math.MaxInt64 + 1, 2, desc(25, 24)},
			{math.MaxUint64, 2, desc(25, 24)},
		} {
			epoch, events, err := s.ReadBackward(t.Context(), "b", c.before, c.limit, nil)
			if err != nil {
				t.Fatalf("ReadBackward(before %d, limit %d): %v", c.before, c.limit, err)
			}
			if got := positions(events); !slices.Equal(got, c.want) {
				t.Fatalf("ReadBackward(before %d, limit %d) = %v, want %v", c.before, c.limit, got, c.want)
			}
			for _, e := range events {
				if e.Epoch != epoch || e.Boundary != "b" {
					t.Fatalf("ReadBackward(before %d): event %d of boundary %q epoch %q, the read's epoch is %q", c.before, e.Position, e.Boundary, e.Epoch, epoch)
				}
			}
		}
		// Each event is the one a forward read returns, field by field.
		_, forward := readAll(t, s, "b", nil)
		_, back, err := s.ReadBackward(t.Context(), "b", 0, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		slices.Reverse(back)
		sameEvents(t, "the backward read of every event, reversed", back, forward)
	})

	t.Run("LimitAndBoundary", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		wantLimitRefused(t, "ReadBackward", s.ReadBackward, "b")
		for _, before := range []uint64{0, 1, 5} {
			if _, _, err := s.ReadBackward(t.Context(), "nope", before, 10, nil); !errors.Is(err, event.ErrNotFound) {
				t.Fatalf("ReadBackward of an unknown boundary (before %d): %v, want ErrNotFound", before, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ReadBackward(t.Context(), "b", 0, 10, nil); !errors.Is(err, event.ErrClosed) {
			t.Fatalf("ReadBackward after Close: %v, want ErrClosed", err)
		}
	})

	t.Run("Queries", func(t *testing.T) {
		t.Parallel()
		s := setupShop(t, open)
		item := func(types []string, tags ...string) event.QueryItem { return event.QueryItem{Types: types, Tags: tags} }
		for _, c := range []struct {
			name string
			q    *event.Query
			want []uint64
		}{
			{"nil query", nil, []uint64{18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}},
			{"an item with neither types nor tags", &event.Query{Items: []event.QueryItem{{}}}, []uint64{18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}},
			{"one type", &event.Query{Items: []event.QueryItem{item([]string{"order.placed"})}}, []uint64{18, 2, 1}},
			{"two types", &event.Query{Items: []event.QueryItem{item([]string{"order.placed", "order.shipped"})}}, []uint64{18, 3, 2, 1}},
			{"one tag", &event.Query{Items: []event.QueryItem{item(nil, "order:1")}}, []uint64{18, 3, 1}},
			{"two tags: all must match", &event.Query{Items: []event.QueryItem{item(nil, "customer:1", "order:1")}}, []uint64{18, 1}},
			{"type and tag", &event.Query{Items: []event.QueryItem{item([]string{"order.placed", "customer.registered"}, "customer:1")}}, []uint64{18, 4, 1}},
			{"several items", &event.Query{Items: []event.QueryItem{item([]string{"order.shipped"}), item(nil, "customer:2"), item([]string{"plain"})}}, []uint64{16, 3, 2}},
			{"percent", &event.Query{Items: []event.QueryItem{item(nil, "100%")}}, []uint64{6}},
			{"percent alone is no wildcard", &event.Query{Items: []event.QueryItem{item(nil, "%")}}, nil},
			{"part of a comma tag", &event.Query{Items: []event.QueryItem{item(nil, "x")}}, []uint64{12}},
			{"unknown tag", &event.Query{Items: []event.QueryItem{item(nil, "nope")}}, nil},
		} {
			got := readAllBackward(t, s, "shop", 0, 2, c.q)
			if !slices.Equal(positions(got), c.want) && !(len(got) == 0 && len(c.want) == 0) {
				t.Errorf("backward query %s: positions %v, want %v", c.name, positions(got), c.want)
			}
			for _, e := range got {
				if !c.q.Matches(&e) {
					t.Errorf("backward query %s returned position %d, which event.Query.Matches rejects", c.name, e.Position)
				}
			}
			// Below a position in the middle: the matches below it.
			_, below, err := s.ReadBackward(t.Context(), "shop", 4, 10, c.q)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(slices.Clone(c.want), func(p uint64) bool { return p >= 4 })
			if !slices.Equal(positions(below), want) && !(len(below) == 0 && len(want) == 0) {
				t.Errorf("backward query %s before 4: positions %v, want %v", c.name, positions(below), want)
			}
		}
	})

	// A random log, read backward from random positions with random
	// limits and queries, gives the forward read's events in reverse.
	t.Run("ReverseOfForward", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "r")
		rng := rand.New(rand.NewPCG(20, 9))
		types := []string{"a", "b", "c.d", "e"}
		tags := []string{"x", "y", "z", "k:1", "k:2"}
		var n uint64
		for n < 400 {
			size := 1 + rng.IntN(40)
			in := make([]event.Input, size)
			for i := range in {
				var ts []string
				for _, tag := range tags {
					if rng.IntN(3) == 0 {
						ts = append(ts, tag)
					}
				}
				in[i] = ev(types[rng.IntN(len(types))], ts...)
			}
			n = mustAppend(t, s, "r", prep(t, "r", in...), nil).Last
		}
		queries := []*event.Query{nil,
			{Items: []event.QueryItem{{Types: []string{"a"}}}},
			{Items: []event.QueryItem{{Types: []string{"b", "c.d"}}}},
			{Items: []event.QueryItem{{Tags: []string{"x"}}}},
			{Items: []event.QueryItem{{Tags: []string{"x", "k:2"}}}},
			{Items: []event.QueryItem{{Types: []string{"e"}, Tags: []string{"y"}}, {Tags: []string{"z", "k:1"}}}},
			{Items: []event.QueryItem{{Types: []string{"nope"}}}},
		}
		for _, q := range queries {
			_, forward := readAll(t, s, "r", q)
			slices.Reverse(forward)
			sameEvents(t, fmt.Sprintf("query %v: every page backward", q), readAllBackward(t, s, "r", 0, 7, q), forward)
			for range 20 {
				before := rng.Uint64N(n + 10)
				limit := 1 + rng.IntN(60)
				_, got, err := s.ReadBackward(t.Context(), "r", before, limit, q)
				if err != nil {
					t.Fatalf("ReadBackward(before %d, limit %d, query %v): %v", before, limit, q, err)
				}
				want := slices.DeleteFunc(slices.Clone(forward), func(e event.Event) bool { return before > 0 && e.Position >= before })
				want = want[:min(limit, len(want))]
				sameEvents(t, fmt.Sprintf("ReadBackward(before %d, limit %d, query %v)", before, limit, q), got, want)
			}
		}
	})

	// While appends commit, every backward read of every event is a dense
	// run down from a head no older than the one before the read: the
	// events and the head are of one snapshot, and nothing uncommitted is
	// seen (I1).
	t.Run("WhileAppending_I1", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "w")
		mustAppend(t, s, "w", batch(t, "w", 5, "t"), nil)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					in, err := mkBatch("w", 3, "t")
					if err == nil {
						_, err = s.Append(ctx, "w", in, nil)
					}
					if err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
				}
			})
		}
		for range 100 {
			h := head(t, s, "w")
			_, events, err := s.ReadBackward(t.Context(), "w", 0, 20, nil)
			if err != nil {
				t.Fatalf("ReadBackward while appending: %v", err)
			}
			if len(events) == 0 || events[0].Position < h {
				t.Fatalf("ReadBackward while appending = %v; the head before it was %d", positions(events), h)
			}
			for i, e := range events {
				if e.Position != events[0].Position-uint64(i) {
					t.Fatalf("I1: ReadBackward while appending = %v, not dense", positions(events))
				}
			}
		}
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("append: %v", err)
		}
	})

	t.Run("BadRows_I1", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		mustAppend(t, s, "b", batch(t, "b", 10, "t.kept"), nil)
		ed.Delete(t, s, "b", 5)
		// The newer good events come with the error, none past the hole.
		wantBadBackward(t, s, "b", 0, 100, nil, 5, "position", []uint64{10, 9, 8, 7, 6})
		wantBadBackward(t, s, "b", 7, 2, nil, 5, "position", []uint64{6})
		wantBadBackward(t, s, "b", 6, 10, nil, 5, "position", []uint64{})
		wantBackward(t, s, "b", 0, 5, nil, []uint64{10, 9, 8, 7, 6}) // stops before the hole
		wantBackward(t, s, "b", 5, 10, nil, []uint64{4, 3, 2, 1})
		// A query does not see the hole between two matches (as Read).
		q := &event.Query{Items: []event.QueryItem{{Types: []string{"t.kept"}}}}
		wantBackward(t, s, "b", 0, 100, q, []uint64{10, 9, 8, 7, 6, 4, 3, 2, 1})
		// A row moved beyond the head is no event: never returned, and the
		// head's own row is missing.
		ed.Move(t, s, "b", 10, 11)
		wantBadBackward(t, s, "b", 0, 100, nil, 10, "position", []uint64{})
		wantBadBackward(t, s, "b", 12, 100, nil, 10, "position", []uint64{})
		wantBackward(t, s, "b", 0, 100, q, []uint64{9, 8, 7, 6, 4, 3, 2, 1})
		wantBackward(t, s, "b", 10, 4, nil, []uint64{9, 8, 7, 6})
		if ed.SetText != nil {
			ed.SetText(t, s, "b", 8, "data", `{"broken":`)
			wantBadBackward(t, s, "b", 10, 100, nil, 8, "data", []uint64{9})
			wantBadBackward(t, s, "b", 10, 100, q, 8, "data", []uint64{9})
			ed.SetText(t, s, "b", 8, "data", `{}`)
			ed.SetText(t, s, "b", 7, "tags", `not json`)
			wantBadBackward(t, s, "b", 10, 100, nil, 7, "tags", []uint64{9, 8})
		}
	})
}

// readAllBackward reads every event of the boundary below before matching
// q, page by page backward with limit.
func readAllBackward(t testing.TB, s backend.Store, boundary string, before uint64, limit int, q *event.Query) []event.Event {
	t.Helper()
	var all []event.Event
	for {
		_, page, err := s.ReadBackward(context.Background(), boundary, before, limit, q)
		if err != nil {
			t.Fatalf("ReadBackward(%q, before %d): %v", boundary, before, err)
		}
		if len(page) > limit {
			t.Fatalf("ReadBackward(%q, before %d, limit %d) returned %d events", boundary, before, limit, len(page))
		}
		if len(page) == 0 {
			return all
		}
		if last := page[len(page)-1].Position; before > 0 && last >= before {
			t.Fatalf("ReadBackward(%q, before %d) returned position %d, not below it", boundary, before, last)
		}
		all = append(all, page...)
		before = page[len(page)-1].Position
		if before == 1 {
			return all
		}
	}
}

// sameEvents fails unless got and want are the same events, field by field.
func sameEvents(t testing.TB, what string, got, want []event.Event) {
	t.Helper()
	if !slices.Equal(positions(got), positions(want)) {
		t.Fatalf("%s: positions %v, want %v", what, positions(got), positions(want))
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if g.ID != w.ID || g.Type != w.Type || g.Epoch != w.Epoch || g.Boundary != w.Boundary || !g.Time.Equal(w.Time) ||
			string(g.Data) != string(w.Data) || string(g.Metadata) != string(w.Metadata) || !slices.Equal(g.Tags, w.Tags) {
			t.Fatalf("%s: the event at position %d is %+v, the forward read's is %+v", what, g.Position, *g, *w)
		}
	}
}

// wantBackward reads backward and wants exactly the positions want.
func wantBackward(t *testing.T, s backend.Store, boundary string, before uint64, limit int, q *event.Query, want []uint64) {
	t.Helper()
	_, events, err := s.ReadBackward(context.Background(), boundary, before, limit, q)
	if err != nil {
		t.Fatalf("ReadBackward(%q, before %d, limit %d): %v; the rows it reaches are intact", boundary, before, limit, err)
	}
	if got := positions(events); !slices.Equal(got, want) {
		t.Fatalf("ReadBackward(%q, before %d, limit %d) = positions %v, want %v", boundary, before, limit, got, want)
	}
}

// wantBadBackward reads backward and wants the error naming the bad row,
// with the good events before it in the read's order, good.
func wantBadBackward(t *testing.T, s backend.Store, boundary string, before uint64, limit int, q *event.Query, pos uint64, column string, good []uint64) {
	t.Helper()
	_, events, err := s.ReadBackward(context.Background(), boundary, before, limit, q)
	if err == nil {
		t.Fatalf("ReadBackward(%q, before %d, limit %d) = positions %v, no error: the bad row at %d was served or skipped",
			boundary, before, limit, positions(events), pos)
	}
	wantCorrupt(t, "ReadBackward", err, boundary, pos, column)
	if got := positions(events); !slices.Equal(got, good) {
		t.Fatalf("ReadBackward(%q, before %d, limit %d) failed at %d with positions %v; want the good ones before it, %v",
			boundary, before, limit, pos, got, good)
	}
}

// setupShop opens a store with the boundary "shop" holding queryEvents.
func setupShop(t *testing.T, open func(t *testing.T) backend.Store) backend.Store {
	t.Helper()
	s := setup(t, open, "shop")
	in := make([]event.Input, len(queryEvents))
	for i, qe := range queryEvents {
		in[i] = ev(qe.typ, qe.tags...)
	}
	mustAppend(t, s, "shop", prep(t, "shop", in...), nil)
	return s
}

// BenchReadPages reports the time of a 50-event page of boundary, forward
// from the start and backward from the head, of every event and of the
// events matching q. Reporting only: no assertion on time.
func BenchReadPages(b *testing.B, s backend.Store, boundary string, q *event.Query) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		q    *event.Query
	}{{"all", nil}, {"query", q}} {
		b.Run(c.name+"/forward", func(b *testing.B) {
			for range b.N {
				if _, _, err := s.Read(ctx, boundary, 0, 50, c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/backward", func(b *testing.B) {
			for range b.N {
				if _, _, err := s.ReadBackward(ctx, boundary, 0, 50, c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// wantLimitRefused fails unless read (op: Read or ReadBackward of a store)
// of boundary, from 0, refuses the limits 0 and -1 with ErrInvalid naming
// the limit.
func wantLimitRefused(t *testing.T, op string, read func(context.Context, string, uint64, int, *event.Query) (string, []event.Event, error), boundary string) {
	t.Helper()
	for _, limit := range []int{0, -1} {
		if _, _, err := read(t.Context(), boundary, 0, limit, nil); !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("%s with limit %d: %v, want ErrInvalid naming the limit", op, limit, err)
		}
	}
}
