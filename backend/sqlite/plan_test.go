package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
)

// fillBig creates the boundary big and appends n events to it, 1,000 an
// append: event k has the type typeOf(k), the data given and the tags
// "all", "customer:<k mod customers>" and "order:<k>".
func fillBig(tb testing.TB, s *Store, n, customers int, data string, typeOf func(k int) string) {
	tb.Helper()
	backendtest.Create(tb, s, "big")
	backendtest.Fill(tb, s, "big", n, func(k int) event.Input {
		return event.Input{ID: event.NewID(), Type: typeOf(k), Data: json.RawMessage(data),
			Tags: []string{"all", fmt.Sprintf("customer:%d", k%customers), fmt.Sprintf("order:%d", k)}}
	})
}

// TestQueryPlansUseIndexes: on a large boundary, a read, a read-latest and a
// condition by tag are driven by the tag index (event_tags) and by type by
// the (boundary, type, position) index or the primary key from the
// position, never by a scan of every event, and never through a list of
// every position of a tag or type (LIST SUBQUERY), which SQLite
// materialises whole before it applies the LIMIT: one page of a tag every
// event carries read every position of the tag. EXPLAIN QUERY PLAN of the
// statements the store runs.
func TestQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 20000
	s := planBig(t, n)
	for _, c := range planQueries {
		readSQL, readArgs := readSQL(c.q, "big", 0, 100)
		latestSQL, latestArgs := latestSQL(c.q, "big", n)
		condSQL, condArgs := firstMatchSQL(c.q, "big", 0)
		for _, st := range []struct {
			name, sql string
			args      []any
		}{
			{"read", readSQL, readArgs},
			{"latest", latestSQL, latestArgs},
			{"condition", condSQL, condArgs},
		} {
			p := queryPlan(t, s, st.sql, st.args...)
			t.Logf("%s by %s:\n%s", st.name, c.name, p)
			var searches []string
			if c.indexes[0] == planTagIndex {
				// The types of a tagged position are checked by position,
				// never by a search of the events from the bound.
				searches = []string{"SEARCH y USING PRIMARY KEY (boundary=? AND position>?)", "SEARCH y USING PRIMARY KEY (boundary=? AND position<?)"}
			}
			wantPlan(t, st.name+" by "+c.name, p, c.indexes, searches...)
		}
	}
}

// TestLargestQueries: the largest queries validation lets through run on
// every statement: 64 items of 64 types each (more arms than matchSQL
// splits types into), 3 such items (split, 192 arms), 64 items of tags and
// types, and an item of 64 tags. (64 items of 64 tags each, the very
// largest, takes about 2.6 s a statement here, and minutes under -race.)
func TestLargestQueries(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	ctx := context.Background()
	backendtest.Create(t, s, "b")
	tags := make([]string, event.MaxQueryTags)
	for i := range tags {
		tags[i] = fmt.Sprintf("tag:%d", i)
	}
	in, err := event.Prepare("b", []event.Input{
		{Type: "t.63", Data: json.RawMessage(`{}`), Tags: tags},
		{Type: "other", Data: json.RawMessage(`{}`)},
	}, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "b", in, nil); err != nil {
		t.Fatal(err)
	}
	types := make([]string, event.MaxQueryTypes)
	for i := range types {
		types[i] = fmt.Sprintf("t.%d", i)
	}
	items := func(n, nTags int) *event.Query {
		q := &event.Query{Items: make([]event.QueryItem, n)}
		for i := range q.Items {
			q.Items[i].Types = types
			q.Items[i].Tags = tags[:nTags]
		}
		if err := event.ValidateQuery(q); err != nil {
			t.Fatal(err)
		}
		return q
	}
	for _, c := range []struct {
		name string
		q    *event.Query
	}{
		{"64 items of 64 types", items(event.MaxQueryItems, 0)},
		{"3 items of 64 types", items(3, 0)},
		{"64 items of 2 tags and 64 types", items(event.MaxQueryItems, 2)},
		{"1 item of 64 tags and 64 types", items(1, event.MaxQueryTags)},
	} {
		start := time.Now()
		_, got, err := s.Read(ctx, "b", 0, 10, c.q)
		t.Logf("read %s: %v", c.name, time.Since(start))
		if err != nil || len(got) != 1 || got[0].Position != 1 {
			t.Fatalf("read %s: %d events, %v; want position 1", c.name, len(got), err)
		}
		l, err := s.Latest(ctx, "b", c.q)
		if err != nil || l.Event == nil || l.Event.Position != 1 {
			t.Fatalf("latest %s: %+v, %v; want position 1", c.name, l, err)
		}
		pos, found, err := firstMatch(ctx, s.rdb, "b", &event.Condition{Query: *c.q})
		if err != nil || !found || pos != 1 {
			t.Fatalf("condition %s: %d, %v, %v; want position 1", c.name, pos, found, err)
		}
	}
}

// queryPlan is SQLite's EXPLAIN QUERY PLAN of a statement on s's read
// connections, one detail a line.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	return strings.Join(lines, "\n")
}
