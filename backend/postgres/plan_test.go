package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/event"
)

// TestQueryPlansUseIndexes: on a large boundary, a read, a read-latest and a
// condition by tag use the GIN tag index (orisun_events_tags) and by type
// the (boundary, type, position) index. EXPLAIN of the statements the
// store runs, after ANALYZE.
func TestQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	create(t, s, "big")
	ctx := context.Background()
	const n = 20000
	for start := 0; start < n; start += 1000 {
		in := make([]event.Input, 1000)
		for i := range in {
			k := start + i
			in[i] = event.Input{ID: event.NewID(), Type: fmt.Sprintf("type.%d", k%500), Data: json.RawMessage(`{}`),
				Tags: []string{fmt.Sprintf("customer:%d", k%5000), fmt.Sprintf("order:%d", k)}}
		}
		if _, err := s.Append(ctx, "big", in, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE orisun_events`); err != nil {
		t.Fatal(err)
	}
	item := func(types []string, tags ...string) *event.Query {
		return &event.Query{Items: []event.QueryItem{{Types: types, Tags: tags}}}
	}
	const tagIndex, typeIndex = "orisun_events_tags", "orisun_events_boundary_type_position"
	for _, c := range []struct {
		name  string
		q     *event.Query
		index string
	}{
		{"tag", item(nil, "customer:42"), tagIndex},
		{"two tags", item(nil, "customer:42", "order:42"), tagIndex},
		{"type", item([]string{"type.7"}), typeIndex},
	} {
		read, rargs := readSQL(c.q)
		latest, largs := latestSQL(c.q)
		cond := &event.Condition{Query: *c.q}
		first, cargs := firstMatchSQL(cond)
		for _, st := range []struct {
			name, sql string
			args      []any
		}{
			{"read", read, append([]any{"big", int64(0), 100}, rargs...)},
			{"latest", latest, append([]any{"big"}, largs...)},
			{"condition", first, append([]any{"big", int64(0), int64(n)}, cargs...)},
		} {
			rows, err := s.pool.Query(ctx, "EXPLAIN "+st.sql, st.args...)
			if err != nil {
				t.Fatalf("EXPLAIN %s by %s: %v", st.name, c.name, err)
			}
			var lines []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				lines = append(lines, line)
			}
			rows.Close()
			p := strings.Join(lines, "\n")
			t.Logf("%s by %s:\n%s", st.name, c.name, p)
			if c.index == typeIndex && st.name == "condition" && strings.Contains(p, "Index Scan using orisun_events_pkey") &&
				strings.Contains(p, `"position" <= `) {
				// The first match of a type that is 1 in 500, LIMIT 1: the
				// planner walks the position range instead, expecting a
				// hit within ~500 rows; bounded on both sides, it is no
				// full scan either.
				continue
			}
			if !strings.Contains(p, c.index) {
				t.Errorf("%s by %s: the plan does not use %s:\n%s", st.name, c.name, c.index, p)
			}
		}
	}
}
