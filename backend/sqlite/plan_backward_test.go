package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
)

// TestReadBackwardPlans: on a large boundary, a backward read without a
// query is one search of the primary key from the bound down, with no
// sort (no TEMP B-TREE) and no scan of the boundary; with each query of
// the forward plan test (planQueries) it is driven by the indexes the
// forward read uses (matchSQL), never through a list of every position of
// a tag or type. EXPLAIN QUERY PLAN of the
// statement the store runs; and the reads give what the plans promise.
func TestReadBackwardPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20000
	s := planBig(t, n)
	every := planQuery{"every event", nil, []string{"SEARCH events USING PRIMARY KEY (boundary=? AND position<?)"}}
	for _, c := range append([]planQuery{every}, planQueries...) {
		for _, top := range []uint64{n, n / 2} {
			sql, args := readBackwardSQL(c.q, "big", top, 50)
			p := queryPlan(t, s, sql, args...)
			t.Logf("backward read by %s up to %d:\n%s", c.name, top, p)
			var sorted []string
			if c.q == nil {
				sorted = []string{"TEMP B-TREE"}
			}
			wantPlan(t, "backward read by "+c.name, p, c.indexes, sorted...)
		}
	}
	_, events, err := s.ReadBackward(ctx, "big", 0, 50, nil)
	if err != nil || len(events) != 50 || events[0].Position != n || events[49].Position != n-49 {
		t.Fatalf("backward read from the head: %d events, %v", len(events), err)
	}
	_, events, err = s.ReadBackward(ctx, "big", n/2, 3, backendtest.QueryItem(nil, "customer:42"))
	if err != nil || len(events) != 2 || events[0].Position != 5043 || events[1].Position != 43 {
		t.Fatalf("backward read by tag below %d: %d events, %v; want positions 5043 and 43", n/2, len(events), err)
	}
}

// wantPlan fails the test, naming the statement what, unless its plan p
// uses one of indexes and has no scan of a table (events, or its aliases e,
// y and t), no LIST SUBQUERY (a list of every position of a tag or type,
// materialised whole before the LIMIT) and none of bads.
func wantPlan(t *testing.T, what, p string, indexes []string, bads ...string) {
	t.Helper()
	found := false
	for _, index := range indexes {
		found = found || strings.Contains(p, index)
	}
	if !found {
		t.Errorf("%s: the plan uses none of %q:\n%s", what, indexes, p)
	}
	for _, bad := range append([]string{"SCAN events", "SCAN e ", "SCAN y", "SCAN t", "LIST SUBQUERY"}, bads...) {
		if strings.Contains(p+" ", bad) {
			t.Errorf("%s: the plan has %q:\n%s", what, bad, p)
		}
	}
}

// planQuery is a query whose statements' plans are judged, with the
// indexes one of which they must use.
type planQuery struct {
	name    string
	q       *event.Query
	indexes []string
}

// planQueries are the queries of the plan tests, on a boundary of
// planBig: by tags, by types, and by both.
var planQueries = []planQuery{
	{"tag", backendtest.QueryItem(nil, "customer:42"), []string{planTagIndex}},
	{"common tag", backendtest.QueryItem(nil, "all"), []string{planTagIndex}},
	{"two tags", backendtest.QueryItem(nil, "customer:42", "order:42"), []string{planTagIndex}},
	{"type", backendtest.QueryItem([]string{"type.7"}), planTypeIndexes},
	{"common type", backendtest.QueryItem([]string{"common"}), planTypeIndexes},
	{"two types", backendtest.QueryItem([]string{"common", "type.7"}), planTypeIndexes},
	{"type and tag", backendtest.QueryItem([]string{"type.7"}, "customer:42"), []string{planTagIndex}},
	{"two items", &event.Query{Items: []event.QueryItem{{Tags: []string{"all"}}, {Types: []string{"common"}}}}, []string{planTagIndex}},
}

// The tag index is event_tags, aliased t in the statements; a type-only
// item reads events aliased y, by the type index or the primary key.
const planTagIndex = "SEARCH t USING PRIMARY KEY (boundary=? AND tag=?"

var planTypeIndexes = []string{"SEARCH y USING COVERING INDEX events_boundary_type_position",
	"SEARCH y USING INDEX events_boundary_type_position", "SEARCH y USING PRIMARY KEY (boundary=? AND position"}

// planBig opens a store whose boundary big holds n events (fillBig: half
// of type common, the others of 50 types; tags all, customer:<k mod 5000>,
// order:<k>), analyzed.
func planBig(t testing.TB, n int) *Store {
	t.Helper()
	s := setup(t, Config{Synchronous: "OFF"})
	fillBig(t, s, n, 5000, `{}`, func(k int) string {
		if k%2 == 0 {
			return "common"
		}
		return fmt.Sprintf("type.%d", k%50)
	})
	if _, err := s.wdb.ExecContext(context.Background(), `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkReadBackward reports the time of a 50-event page of a
// 20,000-event boundary, forward from the start and backward from the
// head, of every event and of a tag of 4 events. Reporting only:
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench BenchmarkReadBackward ./backend/sqlite/
func BenchmarkReadBackward(b *testing.B) {
	backendtest.BenchReadPages(b, planBig(b, 20000), "big", backendtest.QueryItem(nil, "customer:42"))
}
