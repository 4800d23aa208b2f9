package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/event"
)

// TestQueryPlansUseIndexes: on a large boundary, a read, a read-latest and a
// condition by tag are driven by the tag index (event_tags) and by type by
// the (boundary, type, position) index, never by a scan of every event
// after the position. EXPLAIN QUERY PLAN of the statements the store runs.
func TestQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Synchronous: "OFF"})
	ctx := context.Background()
	if _, _, err := s.CreateBoundary(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for start := 0; start < n; start += 1000 {
		in := make([]event.Input, 1000)
		for i := range in {
			k := start + i
			in[i] = event.Input{ID: event.NewID(), Type: fmt.Sprintf("type.%d", k%50), Data: json.RawMessage(`{}`),
				Tags: []string{fmt.Sprintf("customer:%d", k%5000), fmt.Sprintf("order:%d", k)}}
		}
		if _, err := s.Append(ctx, "big", in, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.wdb.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	item := func(types []string, tags ...string) *event.Query {
		return &event.Query{Items: []event.QueryItem{{Types: types, Tags: tags}}}
	}
	plan := func(query string, args ...any) string {
		t.Helper()
		rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
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
	// The tag index is event_tags, aliased t in the filter.
	const tagIndex = "SEARCH t USING PRIMARY KEY (boundary=? AND tag=?"
	for _, c := range []struct {
		name  string
		q     *event.Query
		index string
	}{
		{"tag", item(nil, "customer:42"), tagIndex},
		{"two tags", item(nil, "customer:42", "order:42"), tagIndex},
		{"type", item([]string{"type.7"}), "events_boundary_type_position"},
		{"type and tag", item([]string{"type.7"}, "customer:42"), tagIndex},
	} {
		filter, fargs := whereQuery(c.q, boundAfter)
		latestFilter, latestArgs := whereQuery(c.q, boundUpTo)
		for _, st := range []struct {
			name, sql string
			args      []any
		}{
			{"read", sqlReadPrefix + filter + sqlReadSuffix, append(append([]any{"big", 0}, fargs...), 100)},
			{"latest", sqlLatestPrefix + latestFilter + sqlLatestSuffix, append([]any{"big", n}, latestArgs...)},
			{"condition", sqlFirstMatchPrefix + filter + sqlFirstMatchSuffix, append([]any{"big", 0}, fargs...)},
		} {
			p := plan(st.sql, st.args...)
			t.Logf("%s by %s:\n%s", st.name, c.name, p)
			if !strings.Contains(p, c.index) {
				t.Errorf("%s by %s: the plan does not use %s:\n%s", st.name, c.name, c.index, p)
			}
			if strings.Contains(p, "SCAN events") {
				t.Errorf("%s by %s: the plan scans the events:\n%s", st.name, c.name, p)
			}
		}
	}
}
