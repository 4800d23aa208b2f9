package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// TestQueryPlansUseIndexes: on a large boundary, a read, a read-latest and a
// condition by tag use the GIN tag index (orisun_events_tags) and by type
// the (boundary, type, position) index. EXPLAIN of the statements the
// store runs, after ANALYZE.
func TestQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	const n = 20000
	s := planBig(t, n)
	item := backendtest.QueryItem
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
	backendtest.Create(t, s, "big")
	ctx := context.Background()
	backendtest.Fill(t, s, "big", 20000, func(int) event.Input {
		return event.Input{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{"x"}}
	})
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
// index (see Open, plan_cache_mode). So is the conditional append statement
// (see sqlGenericPlans): the plan its condition needs depends on the
// values (the range after a recent position; the tag index for a rare tag
// after an old one). The unconditioned append statement does use the
// cached generic plan: planning it took about 0.2 ms, against 0.52 ms to
// run it for 64 events.
func TestPlanCacheModes(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{MaxConns: 1})
	backendtest.Create(t, s, "big")
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
	backendtest.Fill(t, s, "big", n, func(k int) event.Input {
		return prep(t, []event.Input{{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{fmt.Sprintf("entity:%d", k%64)}}})[0]
	})
	if _, err := s.pool.Exec(ctx, `ANALYZE orisun_events`); err != nil {
		t.Fatal(err)
	}
	// Planned with its values, the condition after a recent position (the
	// decision's usual shape) walks only the range after it. (A generic
	// plan walked every event with the tag, or the whole boundary.)
	condPlan := func(after uint64, tag string) string {
		t.Helper()
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{tag}}}}, After: after}
		sql, fargs := appendSQL(cond, false)
		var cols eventColumns
		cols.add(prep(t, []event.Input{{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{tag}}}))
		return explain(t, s, sql, append(append(cols.args("big"), int64(after)), fargs...)...)
	}
	if p := condPlan(n-10, "entity:5"); !strings.Contains(p, "Index Scan using orisun_events_pkey on orisun_events ev") {
		t.Errorf("a condition after a recent position is not checked on the range after it:\n%s", p)
	}
	// The shape of a condition near the head has that plan even when
	// planned without its values (a prepared statement's generic plan).
	{
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"entity:5"}}}}, After: n - 10}
		sql, _ := appendSQL(cond, true)
		p := genericPlan(t, s, "near_condition", "text, bigint, uuid[], text[], text[], text[], text[], bigint, text[]", sql,
			`'big', 1, ARRAY[gen_random_uuid()], ARRAY['t'], ARRAY['{entity:5}'], ARRAY['{}'], ARRAY[NULL]::text[], `+strconv.Itoa(n-10)+`, ARRAY['entity:5']`)
		if !strings.Contains(p, "$8") || !strings.Contains(p, "Index Scan using orisun_events_pkey on orisun_events ev") ||
			strings.Contains(p, "orisun_events_tags") || strings.Contains(p, "Seq Scan on orisun_events") {
			t.Errorf("the generic plan of a condition near the head is not a walk of the range after the position:\n%s", p)
		}
	}
	// The generic plans of the reads without a query, forward and
	// backward, where PostgreSQL takes them: the walk of the primary key
	// from the position, whatever the position.
	{
		sql, _ := readSQL(nil)
		p := genericPlan(t, s, "read_all", "text, bigint, integer", sql, `'big', 100, 1000`)
		if !strings.Contains(p, "Index Scan using orisun_events_pkey on orisun_events ev") || strings.Contains(p, "Sort") ||
			strings.Contains(p, "Seq Scan on orisun_events") {
			t.Errorf("the generic plan of a read without a query is not a walk of the primary key:\n%s", p)
		}
		sql, _ = readBackwardSQL(nil)
		p = genericPlan(t, s, "read_all_backward", "text, bigint, integer", sql, `'big', 100, 1000`)
		if !strings.Contains(p, "Index Scan Backward using orisun_events_pkey on orisun_events ev") || strings.Contains(p, "Sort") ||
			strings.Contains(p, "Seq Scan on orisun_events") {
			t.Errorf("the generic plan of a backward read without a query is not a backward walk of the primary key:\n%s", p)
		}
	}

	// Conditions near the head (the last append's position) and far from
	// it (position 0, a tag no event has).
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
	for range 12 {
		in := prep(t, []event.Input{{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{"entity:5"}}})
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"nowhere"}}}}, After: 0}
		if _, err := s.Append(ctx, "big", in, cond); err != nil {
			t.Fatal(err)
		}
	}
	q := &event.Query{Items: []event.QueryItem{{Tags: []string{"entity:5"}}}}
	for range 12 {
		if _, _, err := s.Read(ctx, "big", 0, 100, q); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ReadBackward(ctx, "big", 0, 100, q); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Latest(ctx, "big", q); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Read(ctx, "big", n-50, 100, nil); err != nil {
			t.Fatal(err)
		}
	}
	// One connection: the statements the appends and reads prepared are
	// its.
	plans := func(like string, unlike ...string) (generic, custom int64) {
		t.Helper()
		unlike = append(unlike, "%pg_prepared_statements%")
		err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
FROM pg_prepared_statements WHERE statement LIKE $1 AND NOT statement LIKE ANY($2)`, like, unlike).Scan(&generic, &custom)
		if err != nil {
			t.Fatal(err)
		}
		return generic, custom
	}
	// The reads with a query went unnamed, planned with their values each
	// time: none of them is a prepared statement, which could turn
	// generic. The head row's lock is, and runs its generic plan. (The
	// read without a query is prepared too; on a table with statistics
	// PostgreSQL may go on planning it, its generic plan costed as a walk
	// of a third of the boundary: docs/performance.md, "Plans kept for the
	// statements of every group".)
	prepared := queryLines(t, s, `SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%tags @>%' AND statement NOT LIKE '%unnest%'
  AND statement NOT LIKE '%pg_prepared_statements%'`)
	if len(prepared) > 0 {
		t.Errorf("reads with a query were prepared, and may turn to a generic plan after five runs:\n%s", strings.Join(prepared, "\n---\n"))
	}
	if generic, custom := plans(sqlLockHead); generic == 0 || generic+custom < 12 {
		t.Errorf("the head row's lock ran with %d custom and %d generic plans; want generic plans after the first five", custom, generic)
	}
	if generic, custom := plans("%NOT EXISTS%", "%OFFSET 0%"); custom < 12 || generic != 0 {
		t.Errorf("the conditional append statement far from the head ran with %d custom and %d generic plans; want 12+ custom, no generic", custom, generic)
	}
	if generic, custom := plans("%NOT EXISTS%OFFSET 0%"); generic == 0 || generic+custom < 12 {
		t.Errorf("the conditional append statement near the head ran with %d custom and %d generic plans; want generic plans after the first five", custom, generic)
	}
	if generic, _ := plans("%unnest%", "%NOT EXISTS%"); generic == 0 {
		t.Errorf("the append statements never ran with a generic plan; the unconditioned one should after its first five runs")
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
	return strings.Join(queryLines(t, s, "EXPLAIN "+sql, args...), "\n")
}

// queryLines returns the text of the first column of every row sql gives.
func queryLines(t *testing.T, s *Store, sql string, args ...any) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return lines
}

// genericPlan is EXPLAIN EXECUTE of sql prepared as name (with the
// parameter types types) under plan_cache_mode = force_generic_plan: the
// plan a prepared statement turns to after five runs, costed without its
// values (EXPLAIN with bind values plans with them). values are the
// EXECUTE's, as SQL.
func genericPlan(t *testing.T, s *Store, name, types, sql, values string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var lines []string
	err = func() error {
		for _, stmt := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE ` + name + ` (` + types + `) AS ` + sql} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+name+`(`+values+`)`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		for _, stmt := range []string{`DEALLOCATE ` + name, `RESET plan_cache_mode`} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		t.Fatalf("the generic plan of %s: %v", name, err)
	}
	return strings.Join(lines, "\n")
}

// TestConditionNearAStaleHead: a store decides whether a condition is near
// the head from the head it last saw; another node (here another store on
// the same database) may have appended much since. The condition is then
// checked by walking every event after its position, slower, and gives the
// same answers: it holds when nothing after the position matches, and
// conflicts at the first match otherwise, for a query of several items of
// types and tags. The store learns the head when a group takes the head
// row (also one that commits nothing) and from Heads.
func TestConditionNearAStaleHead(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s1 := setup(t, Config{URL: url})
	s2 := setup(t, Config{URL: url})
	other := setup(t, Config{URL: url})
	backendtest.Create(t, s1, "orders")
	ctx := context.Background()
	prep := func(in ...event.Input) []event.Input {
		t.Helper()
		out, err := event.Prepare("orders", in, event.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ev := func(typ string, tags ...string) event.Input {
		return event.Input{Type: typ, Data: json.RawMessage(`{}`), Tags: tags}
	}
	for i, s := range []*Store{s1, s2} {
		if res, err := s.Append(ctx, "orders", prep(ev("order.placed", "order:1")), nil); err != nil || res.First != uint64(i+1) {
			t.Fatalf("append %d: %+v, %v", i+1, res, err)
		}
	}
	// The other store appends 2,000 events (3..2002) the two do not see,
	// one of them matching the query below (position 1,500).
	for start := 0; start < 2000; start += 500 {
		in := make([]event.Input, 500)
		for i := range in {
			in[i] = ev("order.noted", "order:2")
			if start+i+3 == 1500 {
				in[i] = ev("order.paid", "order:1", "x")
			}
		}
		if _, err := other.Append(ctx, "orders", prep(in...), nil); err != nil {
			t.Fatal(err)
		}
	}
	q := event.Query{Items: []event.QueryItem{{Types: []string{"order.shipped"}}, {Types: []string{"order.paid", "order.refunded"}, Tags: []string{"order:1"}}}}
	near := func(s *Store, after uint64) {
		t.Helper()
		if g := (&groupRun{knownHead: s.knownHead("orders")}); !g.near(after) {
			t.Fatalf("the store's head is %d: a condition after %d should count as near", g.knownHead, after)
		}
	}

	// s2 saw head 2: its condition after 2 is near, and meets the match.
	near(s2, 2)
	_, err := s2.Append(ctx, "orders", prep(ev("order.shipped", "order:1")), &event.Condition{Query: q, After: 2})
	var ce *event.ConflictError
	if !errors.As(err, &ce) || ce.Position != 1500 {
		t.Fatalf("condition after 2 with a match at 1500 (appended by another store): %v, want a conflict at 1500", err)
	}
	if h := s2.knownHead("orders"); h != 2002 {
		t.Errorf("after a group that took the head row at 2002 and committed nothing, the store knows head %d", h)
	}
	// s1 saw head 1: its condition after 1 on a query nothing matches
	// (order.refunded, order:9) is near, and holds.
	near(s1, 1)
	q2 := event.Query{Items: []event.QueryItem{{Types: []string{"order.refunded"}}, {Tags: []string{"order:9"}}}}
	res, err := s1.Append(ctx, "orders", prep(ev("order.shipped", "order:1")), &event.Condition{Query: q2, After: 1})
	if err != nil || res.First != 2003 {
		t.Fatalf("condition after 1 that nothing matches: %+v, %v; want appended at 2003", res, err)
	}
	// Heads teaches a store what others appended.
	if _, err := other.Append(ctx, "orders", prep(ev("order.noted")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Heads(ctx); err != nil {
		t.Fatal(err)
	}
	if h := s1.knownHead("orders"); h != 2004 {
		t.Errorf("after Heads, the store knows head %d, want 2004", h)
	}
	// Now s1 knows the condition after 1 is far from the head: the other
	// shape, planned with its values, meets the same match.
	if g := (&groupRun{knownHead: s1.knownHead("orders")}); g.near(1) {
		t.Fatalf("the store's head is %d: a condition after 1 should not count as near", g.knownHead)
	}
	_, err = s1.Append(ctx, "orders", prep(ev("order.shipped", "order:1")), &event.Condition{Query: q, After: 1})
	if !errors.As(err, &ce) || ce.Position != 1500 {
		t.Fatalf("condition after 1, far from the head, with a match at 1500: %v, want a conflict at 1500", err)
	}
}
