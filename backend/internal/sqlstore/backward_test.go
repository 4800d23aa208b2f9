package sqlstore_test

import (
	"testing"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// TestCheckPageBackward_I1: a backward page descends from its top; without
// a query it holds every position from the top down, and reaches 1 unless
// it is full; a bad row is named and the newer events before it are good.
func TestCheckPageBackward_I1(t *testing.T) {
	notJSON := page(9, 8, 7)
	notJSON[1].Data = []byte(`nope`)
	checkPages(t, func(c pageCase) (int, error) {
		return sqlstore.CheckPageBackward("b", c.bound, c.head, c.limit, c.events, c.dense, true)
	}, []pageCase{
		{"intact to the start", 3, 9, 100, page(3, 2, 1), true, 3, 0, ""},
		{"full page", 9, 9, 2, page(9, 8), true, 2, 0, ""},
		{"empty below 1", 0, 9, 10, page(), true, 0, 0, ""},
		{"a query's page", 9, 9, 10, page(8, 3), false, 2, 0, ""},
		{"the top missing", 9, 9, 10, page(8, 7), true, 0, 9, "missing"},
		{"a hole in the middle", 9, 9, 10, page(9, 7), true, 1, 8, "missing: positions are dense up to the head 9"},
		{"short of the start", 9, 9, 10, page(9, 8), true, 2, 7, "missing"},
		{"nothing though the top is 4", 4, 9, 10, page(), true, 0, 4, "missing"},
		{"ascending", 9, 9, 10, page(3, 8), false, 1, 8, "out of position order"},
		{"above the top", 5, 9, 10, page(7), false, 0, 7, "out of position order"},
		{"beyond the head", 9, 9, 10, page(10, 9), false, 0, 10, "beyond the boundary's head 9"},
		{"position 0", 9, 9, 10, page(9, 0), false, 1, 0, "out of position order"},
		{"not JSON", 9, 9, 10, notJSON, true, 1, 8, "not valid JSON"},
	})
	for _, c := range []struct{ before, head, want uint64 }{{0, 9, 9}, {1, 9, 0}, {5, 9, 4}, {10, 9, 9}, {11, 9, 9}, {1 << 63, 9, 9}, {0, 0, 0}} {
		if got := sqlstore.BackwardTop(c.before, c.head); got != c.want {
			t.Errorf("BackwardTop(before %d, head %d) = %d, want %d", c.before, c.head, got, c.want)
		}
	}
}

// page is a read page of boundary "b" at the positions given, with JSON
// data.
func page(positions ...uint64) []event.Event {
	out := make([]event.Event, len(positions))
	for i, p := range positions {
		out[i] = event.Event{Boundary: "b", Position: p, Data: []byte(`{}`)}
	}
	return out
}
