package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// Edit changes stored rows behind a store's back, with SQL on its own
// connection, as someone with access to the database might: what the
// store must name rather than serve or skip (docs/operations.md, "A bad
// row").
type Edit struct {
	// Delete deletes the row at pos.
	Delete func(t *testing.T, s backend.Store, boundary string, pos uint64)
	// Move moves the row at from to position to.
	Move func(t *testing.T, s backend.Store, boundary string, from, to uint64)
	// SetText sets a column of the row at pos ("data", "metadata" or
	// "tags") to text that is not what orisun stores there. Nil when the
	// store's column types refuse such text (PostgreSQL's json and
	// text[]): then it cannot happen.
	SetText func(t *testing.T, s backend.Store, boundary string, pos uint64, column, text string)
}

// testBadRows: a row deleted, moved past the head or edited into text that
// is not JSON is named by position and column (an *event.CorruptError,
// event.ErrCorrupt) by every read that reaches it, never served and never
// skipped (I1: a reader never sees p+1 without p); reads that stop short
// of it still work; an append that runs into a row beyond the head is
// refused with ErrCorrupt naming it, not ErrConflict; and once the row is
// repaired everything works again.
func testBadRows(t *testing.T, open func(t *testing.T) backend.Store, ed *Edit) {
	t.Run("Deleted_I1", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		mustAppend(t, s, "b", batch(t, "b", 10, "t.kept"), nil)
		ed.Delete(t, s, "b", 5)
		wantBadRead(t, s, "b", 0, 100, nil, 5, "position")
		wantBadRead(t, s, "b", 3, 2, nil, 5, "position") // [4, 6] is not a page
		wantBadRead(t, s, "b", 4, 1, nil, 5, "position")
		wantRead(t, s, "b", 0, 4, nil, 1, 4) // stops before the hole
		wantRead(t, s, "b", 5, 100, nil, 6, 10)
		if l, err := s.Latest(context.Background(), "b", nil); err != nil || l.Event == nil || l.Event.Position != 10 {
			t.Fatalf("Latest with the row at the head intact = %+v, %v; want position 10", l, err)
		}
		// The head's own row: a short page that does not reach the head,
		// and a read-latest of everything, are missing it.
		ed.Delete(t, s, "b", 10)
		wantBadRead(t, s, "b", 6, 100, nil, 10, "position")
		wantBadLatest(t, s, "b", nil, 10, "position")
		wantRead(t, s, "b", 6, 3, nil, 7, 9)
	})
	t.Run("DeletedUnderQuery", func(t *testing.T) {
		// The limit docs/operations.md ("A bad row", "What is not seen")
		// states: what reads only the rows that match does not see a
		// matching row deleted below the head, while a read without a
		// query does.
		t.Parallel()
		s := setup(t, open, "b")
		mustAppend(t, s, "b", batch(t, "b", 3, "t.other"), nil)
		mustAppend(t, s, "b", batch(t, "b", 1, "t.match"), nil) // 4
		mustAppend(t, s, "b", batch(t, "b", 1, "t.other"), nil) // 5
		mustAppend(t, s, "b", batch(t, "b", 1, "t.match"), nil) // 6
		q := &event.Query{Items: []event.QueryItem{{Types: []string{"t.match"}}}}
		ed.Delete(t, s, "b", 6)
		wantBadRead(t, s, "b", 0, 100, nil, 6, "position")
		if _, events, err := s.Read(context.Background(), "b", 0, 100, q); err != nil || !slices.Equal(positions(events), []uint64{4}) {
			t.Fatalf("Read with a query over a deleted match = %v, %v; the stated limit is [4] without an error", positions(events), err)
		}
		ed.Delete(t, s, "b", 4)
		if l, err := s.Latest(context.Background(), "b", q); err != nil || l.Event != nil || l.Head != 6 {
			t.Fatalf("Latest with a query over deleted matches = %+v, %v; the stated limit is no match, head 6", l, err)
		}
		if _, err := s.Append(context.Background(), "b", batch(t, "b", 1, "t.new"), &event.Condition{Query: *q, After: 3}); err != nil {
			t.Fatalf("Append whose condition's only matches were deleted: %v; the stated limit is that it passes", err)
		}
	})
	t.Run("MovedPastHead_I1", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		mustAppend(t, s, "b", batch(t, "b", 10, "t.kept"), nil)
		ed.Move(t, s, "b", 10, 11)
		wantBadRead(t, s, "b", 0, 100, nil, 10, "position")
		wantBadLatest(t, s, "b", nil, 10, "position")
		// A query's read does not see the hole, but it sees the row
		// beyond the head.
		q := &event.Query{Items: []event.QueryItem{{Types: []string{"t.kept"}}}}
		wantBadRead(t, s, "b", 5, 100, q, 11, "position")
		// The next append's position is taken: refused, naming it, and
		// not as a conflict (a client would re-read and retry for ever).
		for _, cond := range []*event.Condition{nil, {After: 10}} {
			_, err := s.Append(context.Background(), "b", batch(t, "b", 2, "t.new"), cond)
			wantCorrupt(t, "Append into a position a row beyond the head holds", err, "b", 11, "position")
			if errors.Is(err, event.ErrConflict) {
				t.Fatalf("Append into a taken position: %v; it must not be a conflict", err)
			}
			if !strings.Contains(err.Error(), "beyond the boundary's head 10") {
				t.Fatalf("Append into a taken position: %v; the message must say the row is beyond the head 10", err)
			}
		}
		if h := head(t, s, "b"); h != 10 {
			t.Fatalf("head after refused appends = %d, want 10", h)
		}
		// Repaired: the row back where it belongs.
		ed.Move(t, s, "b", 11, 10)
		wantRead(t, s, "b", 0, 100, nil, 1, 10)
		res := mustAppend(t, s, "b", batch(t, "b", 2, "t.new"), nil)
		if res.First != 11 || res.Last != 12 {
			t.Fatalf("Append after the repair = %d..%d, want 11..12", res.First, res.Last)
		}
		WantStored(t, s, "b", 12, "")
	})
	if ed.SetText == nil {
		return
	}
	t.Run("NotJSON", func(t *testing.T) {
		t.Parallel()
		s := setup(t, open, "b")
		in := batch(t, "b", 6, "t.kept", "tag")
		for i := range in {
			in[i].Metadata = json.RawMessage(`{"m":1}`)
		}
		mustAppend(t, s, "b", in, nil)
		ed.SetText(t, s, "b", 3, "data", `{"broken":`)
		q := &event.Query{Items: []event.QueryItem{{Types: []string{"t.kept"}}}}
		wantBadRead(t, s, "b", 0, 100, nil, 3, "data")
		wantBadRead(t, s, "b", 2, 1, nil, 3, "data")
		wantBadRead(t, s, "b", 0, 100, q, 3, "data")
		wantRead(t, s, "b", 0, 2, nil, 1, 2)
		wantRead(t, s, "b", 3, 100, nil, 4, 6)
		ed.SetText(t, s, "b", 6, "metadata", `not json`)
		wantBadLatest(t, s, "b", nil, 6, "metadata")
		wantBadLatest(t, s, "b", q, 6, "metadata")
		wantBadRead(t, s, "b", 4, 100, nil, 6, "metadata")
		ed.SetText(t, s, "b", 5, "data", ``)
		wantBadRead(t, s, "b", 4, 100, nil, 5, "data")
		ed.SetText(t, s, "b", 4, "tags", `not json`)
		wantBadRead(t, s, "b", 3, 100, nil, 4, "tags")
		// Repaired: valid JSON again (not the original bytes; the store
		// serves what it holds).
		ed.SetText(t, s, "b", 3, "data", `{"repaired":true}`)
		ed.SetText(t, s, "b", 4, "tags", `["tag"]`)
		ed.SetText(t, s, "b", 5, "data", `{}`)
		ed.SetText(t, s, "b", 6, "metadata", `{"m":2}`)
		got := wantRead(t, s, "b", 0, 100, nil, 1, 6)
		if string(got[2].Data) != `{"repaired":true}` {
			t.Fatalf("the repaired row's data reads %s", got[2].Data)
		}
	})
}

// wantRead reads and wants exactly the positions first..last, dense.
func wantRead(t *testing.T, s backend.Store, boundary string, after uint64, limit int, q *event.Query, first, last uint64) []event.Event {
	t.Helper()
	_, events, err := s.Read(context.Background(), boundary, after, limit, q)
	if err != nil {
		t.Fatalf("Read(%q, after %d, limit %d): %v; the rows it reaches are intact", boundary, after, limit, err)
	}
	want := []uint64{}
	for p := first; p <= last; p++ {
		want = append(want, p)
	}
	if got := positions(events); !slices.Equal(got, want) {
		t.Fatalf("Read(%q, after %d, limit %d) = positions %v, want %v", boundary, after, limit, got, want)
	}
	return events
}

// wantBadRead reads and wants the error naming the bad row, with the good
// events before it (backend.Reader): without a query every position from
// after+1 up to the row, with one the matching rows among them, in order.
func wantBadRead(t *testing.T, s backend.Store, boundary string, after uint64, limit int, q *event.Query, pos uint64, column string) {
	t.Helper()
	_, events, err := s.Read(context.Background(), boundary, after, limit, q)
	if err == nil {
		t.Fatalf("Read(%q, after %d, limit %d) = positions %v, no error: the bad row at %d was served or skipped",
			boundary, after, limit, positions(events), pos)
	}
	wantCorrupt(t, "Read", err, boundary, pos, column)
	got := positions(events)
	want := []uint64{}
	for p := after + 1; p < pos && len(want) < limit; p++ {
		want = append(want, p)
	}
	if q == nil && !slices.Equal(got, want) {
		t.Fatalf("Read(%q, after %d, limit %d) failed at %d with positions %v; want the good ones before it, %v",
			boundary, after, limit, pos, got, want)
	}
	for i, p := range got {
		if p <= after || p >= pos || (i > 0 && p <= got[i-1]) {
			t.Fatalf("Read(%q, after %d, limit %d, query %v) failed at %d with positions %v; want ascending ones between",
				boundary, after, limit, q, pos, got)
		}
	}
}

// wantBadLatest reads the latest and wants the error naming the bad row.
func wantBadLatest(t *testing.T, s backend.Store, boundary string, q *event.Query, pos uint64, column string) {
	t.Helper()
	l, err := s.Latest(context.Background(), boundary, q)
	if err == nil {
		t.Fatalf("Latest(%q) = %+v, no error: the bad row at %d was served or skipped", boundary, l, pos)
	}
	wantCorrupt(t, "Latest", err, boundary, pos, column)
}

func wantCorrupt(t *testing.T, what string, err error, boundary string, pos uint64, column string) {
	t.Helper()
	var ce *event.CorruptError
	if !errors.Is(err, event.ErrCorrupt) || !errors.As(err, &ce) {
		t.Fatalf("%s: err = %v, want an *event.CorruptError (event.ErrCorrupt)", what, err)
	}
	if ce.Boundary != boundary || ce.Position != pos || ce.Column != column {
		t.Fatalf("%s: err = %v names boundary %q position %d column %q, want %q, %d, %q",
			what, err, ce.Boundary, ce.Position, ce.Column, boundary, pos, column)
	}
	for _, s := range []string{`"` + boundary + `"`, "position " + strconv.FormatUint(pos, 10), "column " + column} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: the message %q does not name %s", what, err, s)
		}
	}
}
