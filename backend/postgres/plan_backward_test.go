package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
)

// TestReadBackwardPlans: on a large boundary, a backward read without a
// query walks the primary key backward from the bound (Index Scan Backward,
// no sort of the boundary), from the head and from a position; by tag it
// uses the GIN tag index and by type the (boundary, type, position) index,
// as the forward read does. EXPLAIN of the statement the store runs, after
// ANALYZE; and the reads give what the plans promise.
func TestReadBackwardPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20000
	s := planBig(t, n)
	all, _ := readBackwardSQL(nil)
	for _, upTo := range []int64{math.MaxInt64, n / 2} {
		p := explain(t, s, all, "big", upTo, 50)
		t.Logf("backward read up to %d:\n%s", upTo, p)
		if !strings.Contains(p, "Index Scan Backward using orisun_events_pkey") || strings.Contains(p, "Sort") {
			t.Errorf("the backward read up to %d is not a backward walk of the primary key without a sort:\n%s", upTo, p)
		}
	}
	item := backendtest.QueryItem
	for _, c := range []struct {
		name  string
		q     *event.Query
		index string
	}{
		{"tag", item(nil, "customer:42"), "orisun_events_tags"},
		{"two tags", item(nil, "customer:42", "order:42"), "orisun_events_tags"},
		{"type", item([]string{"type.7"}), "orisun_events_boundary_type_position"},
	} {
		sql, fargs := readBackwardSQL(c.q)
		p := explain(t, s, sql, append([]any{"big", int64(math.MaxInt64), 50}, fargs...)...)
		t.Logf("backward read by %s:\n%s", c.name, p)
		if !strings.Contains(p, c.index) {
			t.Errorf("backward read by %s: the plan does not use %s:\n%s", c.name, c.index, p)
		}
	}
	_, events, err := s.ReadBackward(ctx, "big", 0, 50, nil)
	if err != nil || len(events) != 50 || events[0].Position != n || events[49].Position != n-49 {
		t.Fatalf("backward read from the head: %d events, %v", len(events), err)
	}
	_, events, err = s.ReadBackward(ctx, "big", 0, 50, item([]string{"type.7"}))
	if err != nil || len(events) != 40 || events[0].Position != n-500+8 {
		t.Fatalf("backward read by type: %d events (first %+v), %v; want 40 from %d", len(events), events[0], err, n-500+8)
	}
}

// planBig opens a store whose boundary big holds n events, appended 1,000
// an append, and analyzes the events: event k (from 0) has the type
// type.<k mod 500> and the tags customer:<k mod 5000> and order:<k>.
func planBig(t testing.TB, n int) *Store {
	t.Helper()
	s := setup(t, Config{})
	backendtest.Create(t, s, "big")
	backendtest.Fill(t, s, "big", n, func(k int) event.Input {
		return event.Input{ID: event.NewID(), Type: fmt.Sprintf("type.%d", k%500), Data: json.RawMessage(`{}`),
			Tags: []string{fmt.Sprintf("customer:%d", k%5000), fmt.Sprintf("order:%d", k)}}
	})
	if _, err := s.pool.Exec(context.Background(), `ANALYZE orisun_events`); err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkReadBackward reports the time of a 50-event page of a
// 20,000-event boundary, forward from the start and backward from the
// head, of every event and of a tag of 4 events. Reporting only:
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench BenchmarkReadBackward ./backend/postgres/
func BenchmarkReadBackward(b *testing.B) {
	backendtest.BenchReadPages(b, planBig(b, 20000), "big", backendtest.QueryItem(nil, "customer:42"))
}
