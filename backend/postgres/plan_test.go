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
			p := explain(t, s, st.sql, st.args...)
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

// TestReadPlanIsOneRangeScan: a read without a query is one range scan of
// the primary key, already in position order, with nothing sorted after
// it. The read used to join the boundary's row to the page, and PostgreSQL
// then sorted the joined page again: a third of the time of a 1,000-event
// read of 1 KB events (pgbench, 14.2–16.0 ms against 8.9–10.0 ms).
func TestReadPlanIsOneRangeScan(t *testing.T) {
	t.Parallel()
	// 20,000 events, so that a page of 1,000 is a twentieth of the table
	// and no planner prefers a sequential scan and a top-N sort to it.
	s := setup(t, Config{})
	create(t, s, "big")
	ctx := context.Background()
	for start := 0; start < 20000; start += 1000 {
		in := make([]event.Input, 1000)
		for i := range in {
			in[i] = event.Input{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{"x"}}
		}
		if _, err := s.Append(ctx, "big", in, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE orisun_events`); err != nil {
		t.Fatal(err)
	}
	read, _ := readSQL(nil)
	p := explain(t, s, read, "big", int64(100), 1000)
	if strings.Contains(p, "Sort") || !strings.Contains(p, "Index Scan using orisun_events_pkey") {
		t.Errorf("the read is not one range scan of the primary key without a sort:\n%s", p)
	}
	// And the read gives what the plan promises.
	epoch, events, err := s.Read(ctx, "big", 100, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1000 || events[0].Position != 101 || events[999].Position != 1100 || events[0].Epoch != epoch || epoch == "" {
		t.Fatalf("read after 100: %d events, %+v … ; epoch %q", len(events), events[0], epoch)
	}
}

// TestPlanCacheModes: a read by tag run many times on one connection keeps
// being planned with its values. A generic plan, which PostgreSQL may switch
// a prepared statement to after five runs, costs "position > $n" as a third
// of the table and walks every event of the boundary instead of the tag
// index (see Open, plan_cache_mode). The conditional append statement, run
// in the group transaction, does use the cached generic plan (see
// sqlGenericPlans): planning it each time cost as much as running it.
func TestPlanCacheModes(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{MaxConns: 1})
	create(t, s, "big")
	ctx := context.Background()
	prep := func(t *testing.T, in []event.Input) []event.Input {
		t.Helper()
		out, err := event.Prepare("big", in, event.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const n = 20000
	for start := 0; start < n; start += 1000 {
		in := make([]event.Input, 1000)
		for i := range in {
			in[i] = event.Input{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{fmt.Sprintf("entity:%d", (start+i)%64)}}
		}
		if _, err := s.Append(ctx, "big", prep(t, in), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE orisun_events`); err != nil {
		t.Fatal(err)
	}
	last := uint64(n)
	for range 12 {
		in := prep(t, []event.Input{{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{"entity:5"}}})
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"entity:5"}}}}, After: last}
		res, err := s.Append(ctx, "big", in, cond)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Last
	}
	q := &event.Query{Items: []event.QueryItem{{Tags: []string{"entity:5"}}}}
	for range 12 {
		if _, _, err := s.Read(ctx, "big", 0, 100, q); err != nil {
			t.Fatal(err)
		}
	}
	// One connection: the statements the appends and reads prepared are
	// its.
	plans := func(like string) (generic, custom int64) {
		t.Helper()
		err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
FROM pg_prepared_statements WHERE statement LIKE $1 AND statement NOT LIKE '%pg_prepared_statements%'`, like).Scan(&generic, &custom)
		if err != nil {
			t.Fatal(err)
		}
		return generic, custom
	}
	if generic, custom := plans("%UNION ALL%"); custom < 12 || generic != 0 {
		t.Errorf("the read statement ran with %d custom and %d generic plans; want 12+ custom, no generic", custom, generic)
	}
	if generic, custom := plans("%NOT EXISTS%"); generic == 0 {
		t.Errorf("the conditional append statement ran with %d custom and %d generic plans; want generic plans after the first five", custom, generic)
	}
}

// TestInPositionOrder: the read's guard against rows out of order (nothing
// in SQL orders the rows of a UNION ALL) sorts them by position.
func TestInPositionOrder(t *testing.T) {
	events := []event.Event{{Position: 3}, {Position: 1}, {Position: 2}}
	inPositionOrder(events)
	for i, e := range events {
		if e.Position != uint64(i+1) {
			t.Fatalf("after inPositionOrder: %v", events)
		}
	}
}

// explain returns the plan PostgreSQL chooses for sql with args, as the
// lines of EXPLAIN joined.
func explain(t *testing.T, s *Store, sql string, args ...any) string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
