package sqlstore

import (
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// BackwardTop is the highest position a backward read below before (0:
// from the head) may return in a snapshot whose head is head: before-1, or
// the head when before is 0 or past it. 0 means nothing can match.
func BackwardTop(before, head uint64) uint64 {
	if before == 0 || before-1 > head {
		return head
	}
	return before - 1
}

// CheckPageBackward checks a backward read page of boundary, asked for
// with limit and read in one snapshot with the boundary's head, from top
// (BackwardTop) down: positions descend from top and none is beyond the
// head; the data and metadata are JSON when checkJSON. A page of every
// event (dense: a read without a query) has every position from top down
// to its last (I1), and reaches position 1 unless it is full: a position
// missing there is a hole, named by the first position missing in the
// read's order (the highest).
//
// It returns how many events, from the first, are good, as CheckPage
// does: the newer events before the bad row.
func CheckPageBackward(boundary string, top, head uint64, limit int, events []event.Event, dense, checkJSON bool) (good int, err error) {
	next := top // the highest position the next event may have
	for i := range events {
		e := &events[i]
		switch {
		case e.Position > head:
			return i, BeyondHead(boundary, e.Position, head)
		case e.Position > next || e.Position == 0:
			return i, &event.CorruptError{Boundary: boundary, Position: e.Position, Column: "position",
				Reason: fmt.Sprintf("the store returned it in a backward read where position %d or below was due: rows out of position order", next)}
		case dense && e.Position != next:
			return i, Hole(boundary, next, head, e.Position)
		}
		if err := CheckEvent(e, head, checkJSON); err != nil {
			return i, err
		}
		next = e.Position - 1
	}
	if dense && len(events) < limit && next > 0 {
		return len(events), Hole(boundary, next, head, 0)
	}
	return len(events), nil
}
