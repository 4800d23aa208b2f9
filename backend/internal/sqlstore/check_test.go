package sqlstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// TestCheckPage_I1_I4: a page with a bad row names the row and says how
// many events before it are good (the publisher publishes those, and
// nothing past the row: I4); a gap that begins past the head is a row
// beyond the head, named by its own position, not a missing position
// that was never written (I1).
func TestCheckPage_I1_I4(t *testing.T) {
	notJSON := page(6, 7, 8, 9)
	notJSON[2].Data = []byte(`{"broken":`)
	checkPages(t, func(c pageCase) (int, error) {
		return sqlstore.CheckPage("b", c.bound, c.head, c.limit, c.events, c.dense, true)
	}, []pageCase{
		{"intact", 5, 9, 100, page(6, 7, 8, 9), true, 4, 0, ""},
		{"full page short of the head", 5, 20, 4, page(6, 7, 8, 9), true, 4, 0, ""},
		{"not JSON in the middle", 5, 9, 100, notJSON, true, 2, 8, "not valid JSON"},
		{"a hole in the middle", 5, 9, 100, page(6, 7, 9), true, 2, 8, "missing: positions are dense up to the head 9"},
		{"a hole at the head", 5, 9, 100, page(6, 7, 8), true, 3, 9, "missing"},
		{"a row far beyond the head", 10, 15, 100, page(11, 12, 13, 14, 15, 1010), true, 5, 1010, "beyond the boundary's head 15"},
		{"a row far beyond the head, nothing before", 15, 15, 100, page(1010), true, 0, 1010, "beyond the boundary's head 15"},
		{"a row just beyond the head", 7, 9, 100, page(8, 9, 10), true, 2, 10, "beyond the boundary's head 9"},
		{"a hole and a row beyond the head", 10, 15, 100, page(11, 12, 14, 15, 1010), true, 2, 13, "missing"},
		{"a query's page beyond the head", 0, 15, 100, page(3, 9, 1010), false, 2, 1010, "beyond the boundary's head 15"},
		{"out of order", 5, 9, 100, page(6, 8, 7), false, 2, 7, "out of position order"},
	})
}

// pageCase is a row of a page check's table: the page's bound (the
// position a forward page reads after, a backward page's top), the head,
// limit and events it was read with, and whether it matches every event;
// then the good events the check counts, and the position and reason of
// its error ("": no error).
type pageCase struct {
	name        string
	bound, head uint64
	limit       int
	events      []event.Event
	dense       bool
	good        int
	pos         uint64
	reason      string
}

// checkPages runs check on each case as a subtest and judges what it
// returns (wantChecked).
func checkPages(t *testing.T, check func(pageCase) (int, error), cases []pageCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good, err := check(c)
			wantChecked(t, good, err, c.good, c.pos, c.reason)
		})
	}
}

// wantChecked fails the test unless a page check (CheckPage,
// CheckPageBackward) counted wantGood good events and returned no error
// when reason is "", or else the corrupt error of position pos saying
// reason.
func wantChecked(t *testing.T, good int, err error, wantGood int, pos uint64, reason string) {
	t.Helper()
	if good != wantGood {
		t.Errorf("good = %d, want %d (%v)", good, wantGood, err)
	}
	if reason == "" {
		if err != nil {
			t.Fatalf("err = %v, want none", err)
		}
		return
	}
	var ce *event.CorruptError
	if !errors.As(err, &ce) || ce.Position != pos || !strings.Contains(err.Error(), reason) {
		t.Fatalf("err = %v; want the corrupt error of position %d saying %q", err, pos, reason)
	}
}
