package backendtest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// queryEvents is the data set of the query tests: position → (type, tags).
// The odd tags make sure a tag is matched as a whole value: never as a
// LIKE pattern ('%', '_'), never as a substring of a list ("x,y", "[z]"),
// never broken by quoting.
var queryEvents = []struct {
	typ  string
	tags []string
}{
	{"order.placed", []string{"customer:1", "order:1"}}, // 1
	{"order.placed", []string{"customer:2", "order:2"}}, // 2
	{"order.shipped", []string{"order:1"}},              // 3
	{"customer.registered", []string{"customer:1"}},     // 4
	{"odd", []string{`a"b`}},                            // 5
	{"odd", []string{"100%"}},                           // 6
	{"odd", []string{"1000"}},                           // 7
	{"odd", []string{"a_c"}},                            // 8
	{"odd", []string{"abc"}},                            // 9
	{"odd", []string{"ünïcödé ✓ 日本"}},                   // 10
	{"odd", []string{"x,y"}},                            // 11
	{"odd", []string{"x", "y"}},                         // 12
	{"odd", []string{"[z]"}},                            // 13
	{"odd", []string{"z"}},                              // 14
	{"odd", []string{`back\slash`, "it's", `{"k":1}`}},  // 15
	{"plain", nil},                                      // 16
	{"odd", []string{"<&>", "null", "a b", " lead"}},    // 17
	{"order.placed", []string{"order:1", "customer:1"}}, // 18
}

func testRead(t *testing.T, open func(t *testing.T) backend.Store) {
	t.Run("Queries", func(t *testing.T) {
		t.Parallel()
		s := setupShop(t, open)
		all := make([]uint64, len(queryEvents))
		for i := range all {
			all[i] = uint64(i + 1)
		}
		item := func(types []string, tags ...string) event.QueryItem { return event.QueryItem{Types: types, Tags: tags} }
		types := func(t ...string) []string { return t }
		cases := []struct {
			name string
			q    *event.Query
			want []uint64
		}{
			{"nil query", nil, all},
			{"no items", &event.Query{}, all},
			{"an item with neither types nor tags", &event.Query{Items: []event.QueryItem{{}}}, all},
			{"one type", &event.Query{Items: []event.QueryItem{item(types("order.placed"))}}, []uint64{1, 2, 18}},
			{"two types", &event.Query{Items: []event.QueryItem{item(types("order.placed", "order.shipped"))}}, []uint64{1, 2, 3, 18}},
			{"one tag", &event.Query{Items: []event.QueryItem{item(nil, "order:1")}}, []uint64{1, 3, 18}},
			{"two tags: all must match", &event.Query{Items: []event.QueryItem{item(nil, "customer:1", "order:1")}}, []uint64{1, 18}},
			{"type and tag", &event.Query{Items: []event.QueryItem{item(types("order.placed", "customer.registered"), "customer:1")}}, []uint64{1, 4, 18}},
			{"several items: any may match", &event.Query{Items: []event.QueryItem{item(types("order.shipped")), item(nil, "customer:2"), item(types("plain"))}}, []uint64{2, 3, 16}},
			{"unknown type", &event.Query{Items: []event.QueryItem{item(types("nope"))}}, nil},
			{"unknown tag", &event.Query{Items: []event.QueryItem{item(nil, "nope")}}, nil},
			{"known tag, other type", &event.Query{Items: []event.QueryItem{item(types("order.shipped"), "customer:1")}}, nil},
			{"double quote", &event.Query{Items: []event.QueryItem{item(nil, `a"b`)}}, []uint64{5}},
			{"percent", &event.Query{Items: []event.QueryItem{item(nil, "100%")}}, []uint64{6}},
			{"percent alone is no wildcard", &event.Query{Items: []event.QueryItem{item(nil, "%")}}, nil},
			{"underscore", &event.Query{Items: []event.QueryItem{item(nil, "a_c")}}, []uint64{8}},
			{"underscore alone is no wildcard", &event.Query{Items: []event.QueryItem{item(nil, "_")}}, nil},
			{"unicode", &event.Query{Items: []event.QueryItem{item(nil, "ünïcödé ✓ 日本")}}, []uint64{10}},
			{"comma", &event.Query{Items: []event.QueryItem{item(nil, "x,y")}}, []uint64{11}},
			{"part of a comma tag", &event.Query{Items: []event.QueryItem{item(nil, "x")}}, []uint64{12}},
			{"brackets", &event.Query{Items: []event.QueryItem{item(nil, "[z]")}}, []uint64{13}},
			{"inside brackets", &event.Query{Items: []event.QueryItem{item(nil, "z")}}, []uint64{14}},
			{"backslash", &event.Query{Items: []event.QueryItem{item(nil, `back\slash`)}}, []uint64{15}},
			{"single quote", &event.Query{Items: []event.QueryItem{item(nil, "it's")}}, []uint64{15}},
			{"JSON-looking tag", &event.Query{Items: []event.QueryItem{item(nil, `{"k":1}`)}}, []uint64{15}},
			{"JSON-looking fragment", &event.Query{Items: []event.QueryItem{item(nil, `"k"`)}}, nil},
			{"HTML characters", &event.Query{Items: []event.QueryItem{item(nil, "<&>")}}, []uint64{17}},
			{"the word null", &event.Query{Items: []event.QueryItem{item(nil, "null")}}, []uint64{17}},
			{"spaces", &event.Query{Items: []event.QueryItem{item(nil, "a b", " lead")}}, []uint64{17}},
		}
		for _, c := range cases {
			_, got := readAll(t, s, "shop", c.q)
			if !slices.Equal(positions(got), c.want) && !(len(got) == 0 && len(c.want) == 0) {
				t.Errorf("query %s: positions %v, want %v", c.name, positions(got), c.want)
			}
			for _, e := range got {
				if !c.q.Matches(&e) {
					t.Errorf("query %s returned position %d, which event.Query.Matches rejects", c.name, e.Position)
				}
			}
		}
		// Conditions use the same matching: a query with matches fails at
		// its first one; a query without matches lets the append through
		// (the probe event matches none of those queries).
		for _, c := range cases {
			cond := &event.Condition{After: 0}
			if c.q != nil {
				cond.Query = *c.q
			}
			_, err := s.Append(t.Context(), "shop", batch(t, "shop", 1, "probe"), cond)
			if len(c.want) > 0 {
				wantConflictAt(t, "condition "+c.name, err, "shop", 0, c.want[0])
			} else if err != nil {
				t.Errorf("condition %s: %v, want the append to pass", c.name, err)
			}
		}
	})

	// Positions never leave the int64 range of the SQL stores: a position
	// beyond it (a uint64 with the high bit set) means "after every
	// event", never a negative number that comes round to the start.
	t.Run("AfterBeyondEveryPosition", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "far")
		mustAppend(t, s, "far", prep(t, "far", ev("a", "x"), ev("b", "x"), ev("a", "y")), nil)
		for _, after := range []uint64{math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
			for _, q := range []*event.Query{nil, {Items: []event.QueryItem{{Types: []string{"a"}}}}, {Items: []event.QueryItem{{Tags: []string{"x"}}}}} {
				if _, events, err := s.Read(t.Context(), "far", after, 10, q); err != nil || len(events) != 0 {
					t.Fatalf("Read(after %d, query %+v) = %d events (%v), want none: nothing is after it", after, q, len(events), err)
				}
				cond := &event.Condition{After: after}
				if q != nil {
					cond.Query = *q
				}
				if _, err := s.Append(t.Context(), "far", prep(t, "far", ev("c")), cond); err != nil {
					t.Fatalf("Append under a condition after %d, query %+v: %v, want it to pass: no event is after it", after, q, err)
				}
			}
		}
	})

	t.Run("LimitMustBePositive", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		wantLimitRefused(t, "Read", s.Read, "orders")
		if _, err := s.Append(t.Context(), "orders", nil, nil); !errors.Is(err, event.ErrInvalid) {
			t.Fatalf("Append of no events: %v, want ErrInvalid", err)
		}
	})

	t.Run("Pagination", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "orders")
		in := make([]event.Input, 25)
		for i := range in {
			typ := "even"
			if i%2 == 0 {
				typ = "odd" // positions 1, 3, 5, …
			}
			in[i] = ev(typ)
		}
		mustAppend(t, s, "orders", prep(t, "orders", in...), nil)
		page := func(after uint64, limit int, q *event.Query) []uint64 {
			t.Helper()
			_, events, err := s.Read(t.Context(), "orders", after, limit, q)
			if err != nil {
				t.Fatalf("Read(after %d, limit %d): %v", after, limit, err)
			}
			return positions(events)
		}
		var got []uint64
		after := uint64(0)
		for {
			p := page(after, 10, nil)
			if len(p) > 10 {
				t.Fatalf("Read with limit 10 returned %d events", len(p))
			}
			if len(p) == 0 {
				break
			}
			got = append(got, p...)
			after = p[len(p)-1]
		}
		if len(got) != 25 || got[0] != 1 || got[24] != 25 {
			t.Fatalf("paged read returned %v, want 1..25", got)
		}
		// Without a query, a page is short only at the head: the
		// publisher takes a short page for the head and waits for a
		// wake-up (backend.Reader).
		for after := uint64(0); after <= 25; after++ {
			for _, limit := range []int{1, 2, 7, 10, 24, 25, 26, 1000} {
				want := min(uint64(limit), 25-after)
				if p := page(after, limit, nil); uint64(len(p)) != want {
					t.Fatalf("Read(after %d, limit %d) of a boundary at head 25 returned %d events, want %d: a page is short only at the head",
						after, limit, len(p), want)
				}
			}
		}
		odd := &event.Query{Items: []event.QueryItem{{Types: []string{"odd"}}}}
		if p := page(0, 3, odd); !slices.Equal(p, []uint64{1, 3, 5}) {
			t.Fatalf("first filtered page = %v, want [1 3 5]", p)
		}
		if p := page(5, 3, odd); !slices.Equal(p, []uint64{7, 9, 11}) {
			t.Fatalf("filtered page after 5 = %v, want [7 9 11]", p)
		}
		if p := page(6, 2, odd); !slices.Equal(p, []uint64{7, 9}) {
			t.Fatalf("filtered page after 6 = %v, want [7 9]", p)
		}
		if p := page(25, 10, nil); len(p) != 0 {
			t.Fatalf("read after the head = %v, want nothing", p)
		}
		if p := page(1000, 10, nil); len(p) != 0 {
			t.Fatalf("read far after the head = %v, want nothing", p)
		}
		epoch, _, err := s.Read(t.Context(), "orders", 25, 10, nil)
		b, _ := s.Boundary(t.Context(), "orders")
		if err != nil || epoch != b.Epoch {
			t.Fatalf("empty read: epoch %q, err %v; want the boundary's epoch %q", epoch, err, b.Epoch)
		}
	})
}

// testDuplicateTag: an event may carry a tag twice (nothing forbids it);
// it is stored as given, and reads, read-latest and conditions by that tag
// (alone, twice in one item, or with another tag) find it once.
func testDuplicateTag(t *testing.T, open func(t *testing.T) backend.Store) {
	s := setup(t, open, "dups")
	ctx := t.Context()
	mustAppend(t, s, "dups", prep(t, "dups", ev("a", "x"), ev("dup.tagged", "d", "d", "x"), ev("b", "y")), nil)
	_, all := readAll(t, s, "dups", nil)
	if got := fmt.Sprint(all[1].Tags); got != "[d d x]" {
		t.Fatalf("stored tags %s, want [d d x] as appended", got)
	}
	for _, q := range []event.Query{tagQuery("d"), tagQuery("d", "d"), tagQuery("x", "d"),
		{Items: []event.QueryItem{{Tags: []string{"d"}}, {Tags: []string{"d", "x"}}}}} {
		_, got := readAll(t, s, "dups", &q)
		if len(got) != 1 || got[0].Position != 2 {
			t.Fatalf("read by %+v: %d events, want only position 2", q, len(got))
		}
		l, err := s.Latest(ctx, "dups", &q)
		if err != nil || l.Event == nil || l.Event.Position != 2 || l.Head != 3 {
			t.Fatalf("latest by %+v: %+v, %v; want position 2", q, l, err)
		}
		_, err = s.Append(ctx, "dups", prep(t, "dups", ev("c")), &event.Condition{Query: q, After: 1})
		wantConflictAt(t, fmt.Sprintf("condition on %+v", q), err, "dups", 1, 2)
	}
	if h := head(t, s, "dups"); h != 3 {
		t.Fatalf("head %d, want 3: the conflicting appends wrote nothing", h)
	}
}
