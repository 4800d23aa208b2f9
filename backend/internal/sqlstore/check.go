package sqlstore

import (
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// The checks of what a read returns. Every stored row was validated at
// append, so these only find rows changed behind orisun's back (an edit, a
// delete, a row moved or inserted with SQL): such a row is named, as an
// *event.CorruptError, and never served or skipped (docs/operations.md,
// "A bad row"). They cost a comparison per event, and a JSON check
// (ValidJSON) of its data and metadata where the column type does not
// guarantee JSON (SQLite's text; PostgreSQL's json columns refuse anything
// else at every write).

// CheckPage checks a read page of boundary after position after, asked
// for with limit and read in one snapshot with the boundary's head:
// positions ascend after after and none is beyond head; the data and
// metadata are JSON when checkJSON. A page of every event (dense: a read
// without a query) also has every position from after+1 to its last (I1),
// and reaches the head unless it is full: a position missing there is a
// hole (a deleted row, or one moved elsewhere), named by the first
// position missing; a gap that begins past the head is no hole, but a row
// beyond the head, named by its own position.
//
// It returns how many events, from the first, are good: all of them when
// err is nil, else those before the bad row that err names. A reader
// returns them with the error (backend.Reader), so that the publisher
// publishes up to the bad row, never past it (I4).
func CheckPage(boundary string, after, head uint64, limit int, events []event.Event, dense, checkJSON bool) (good int, err error) {
	prev := after
	for i := range events {
		e := &events[i]
		switch {
		case e.Position <= prev:
			return i, &event.CorruptError{Boundary: boundary, Position: e.Position, Column: "position",
				Reason: fmt.Sprintf("the store returned it after position %d: rows out of position order", prev)}
		case dense && e.Position != prev+1 && prev >= head:
			// Every position up to the head is there: the row is
			// beyond it, and nothing is missing.
			return i, BeyondHead(boundary, e.Position, head)
		case dense && e.Position != prev+1:
			return i, Hole(boundary, prev+1, head, e.Position)
		}
		if err := CheckEvent(e, head, checkJSON); err != nil {
			return i, err
		}
		prev = e.Position
	}
	if dense && len(events) < limit && prev < head {
		return len(events), Hole(boundary, prev+1, head, 0)
	}
	return len(events), nil
}

// CheckEvent checks one stored event of a boundary whose head is head: its
// position is at most the head, and its data and metadata are JSON when
// checkJSON.
func CheckEvent(e *event.Event, head uint64, checkJSON bool) error {
	if e.Position > head {
		return BeyondHead(e.Boundary, e.Position, head)
	}
	if !checkJSON {
		return nil
	}
	// A stored text is never empty: data is required, and absent
	// metadata is NULL (nil here).
	if !ValidJSON(e.Data) {
		return notJSON(e, "data", e.Data)
	}
	if e.Metadata != nil && !ValidJSON(e.Metadata) {
		return notJSON(e, "metadata", e.Metadata)
	}
	return nil
}

func notJSON(e *event.Event, column string, text []byte) error {
	return &event.CorruptError{Boundary: e.Boundary, Position: e.Position, Column: column,
		Reason: fmt.Sprintf("the stored text (%d bytes) is not valid JSON; orisun validated it at append, "+
			"so it was changed behind orisun's back: restore the row from a backup or repair the text", len(text))}
}

// Hole is the error of position missing from a boundary whose head is head;
// next is the next position stored after it (0: none read).
func Hole(boundary string, position, head, next uint64) error {
	at := ""
	if next > 0 {
		at = fmt.Sprintf(" (the next stored row is at position %d)", next)
	}
	return &event.CorruptError{Boundary: boundary, Position: position, Column: "position",
		Reason: fmt.Sprintf("missing: positions are dense up to the head %d, but no row holds this one%s; it was deleted "+
			"or moved behind orisun's back: restore it from a backup", head, at)}
}

// BeyondHead is the error of a row stored at a position past the boundary's
// head: no append wrote it there, and the next append to reach it fails.
func BeyondHead(boundary string, position, head uint64) error {
	return &event.CorruptError{Boundary: boundary, Position: position, Column: "position",
		Reason: fmt.Sprintf("a stored row is beyond the boundary's head %d: it was written or moved there behind orisun's back; "+
			"move it back where it belongs or delete it", head)}
}

// TakenPosition is the error of an append refused because a row stored
// beyond the head holds a position it would take (a unique violation on
// the position): not a conflict, which would tell the client to re-read
// and try again for ever, but a bad row for an operator to repair.
func TakenPosition(boundary string, position, head uint64) error {
	return &event.CorruptError{Boundary: boundary, Position: position, Column: "position",
		Reason: fmt.Sprintf("the append was refused: a stored row already holds this position, beyond the boundary's head %d; "+
			"it was written or moved there behind orisun's back, and every append that reaches it fails until it is "+
			"moved back where it belongs or deleted", head)}
}

// MatchesAll reports whether q matches every event (nil, no items, or an
// item without types and tags): a read with it is dense (CheckPage).
func MatchesAll(q *event.Query) bool {
	if q == nil || len(q.Items) == 0 {
		return true
	}
	for _, it := range q.Items {
		if len(it.Types) == 0 && len(it.Tags) == 0 {
			return true
		}
	}
	return false
}

// CheckLatest checks the event of a read-latest up to head, read in one
// snapshot with it: the event of a query matching every event (all) is the
// one at the head (an older one means the row at the head is missing), and
// CheckEvent.
func CheckLatest(e *event.Event, head uint64, all, checkJSON bool) error {
	if all && e.Position != head {
		return Hole(e.Boundary, head, head, 0)
	}
	return CheckEvent(e, head, checkJSON)
}

// MatchBeyondHead is the error of a conditional append whose condition
// matched only a row stored beyond the boundary's head (at position): the
// row is no committed event, so the condition did not fail, but the
// append cannot be judged around it either. Not a conflict, which would
// send the client round a re-read (that cannot show the row) and a retry
// for ever.
func MatchBeyondHead(boundary string, position, head uint64) error {
	return &event.CorruptError{Boundary: boundary, Position: position, Column: "position",
		Reason: fmt.Sprintf("the append was refused: its condition matches a stored row beyond the boundary's head %d; "+
			"it was written or moved there behind orisun's back: move it back where it belongs or delete it", head)}
}
