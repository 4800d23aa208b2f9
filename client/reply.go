package client

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// ErrBadReply is the error of a reply that cannot be orisun's answer to the
// request: an epoch that is not a UUID or is the all-zero UUID, positions
// that do not fit the request (an append of n events that did not get n
// consecutive positions from 1 up; a read's events out of order, not after
// the requested position, beyond the head, more than the limit, of another
// boundary or epoch, or not matching the query), or an epoch other than the
// one this client saw for the boundary before. errors.Is(err, ErrBadReply)
// matches it, and the message names what did not fit.
//
// Such a reply is not returned as a success, but the request may have been
// carried out all the same (by orisun, with the reply lost or replaced, or
// not at all, by something else answering on orisun.api.>): send an append
// again with the same event ids, and orisun answers with where they are
// (docs/protocol.md, "Idempotent retry"). Who may answer on orisun.api.> is
// for NATS's permissions to decide (docs/security.md); these checks find what
// a reply shows, not a responder that copies a real epoch and invents
// positions that fit.
var ErrBadReply = errors.New("the reply cannot be orisun's")

// badReply is an ErrBadReply naming the subject and what did not fit.
func badReply(subject, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s; is something other than orisun answering on %s.>?",
		subject, ErrBadReply, fmt.Sprintf(format, args...), api.SubjectPrefix)
}

// checkEpoch refuses an epoch that no orisun makes: not a UUID in its
// 36-character form, or the all-zero UUID.
func checkEpoch(subject, epoch string) error {
	if reason := badEpoch(epoch); reason != "" {
		return badReply(subject, "%s", reason)
	}
	return nil
}

// badEpoch says what is wrong with an epoch, "" when nothing is.
func badEpoch(epoch string) string {
	u, err := uuid.Parse(epoch)
	if len(epoch) != 36 || err != nil {
		return fmt.Sprintf("epoch %q is not a UUID", truncate(epoch))
	}
	if u == uuid.Nil {
		return fmt.Sprintf("epoch %s is the all-zero UUID, which no boundary has", epoch)
	}
	return ""
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// sameEpoch compares a reply's epoch (already checked) with the last one
// this client saw for the boundary, and remembers it. A boundary's epoch
// changes only when the boundary is created again in another store (a new
// or replaced database, docs/design.md §2): the change is reported once, as
// ErrBadReply and event.ErrEpochChanged naming both epochs, and the new
// epoch is the one the next reply is compared with. So a reset boundary
// costs one error per client, and replies that keep switching between two
// epochs (two deployments with different stores answering on one NATS, or
// an impostor) keep failing.
func (c *Client) sameEpoch(subject, boundary, epoch string) error {
	c.epochMu.Lock()
	prev := c.epochs[boundary]
	if c.epochs == nil {
		c.epochs = map[string]string{}
	}
	c.epochs[boundary] = epoch
	c.epochMu.Unlock()
	if prev == "" || prev == epoch {
		return nil
	}
	return fmt.Errorf("%s: %w: %w: boundary %q was in epoch %s in this client's earlier replies and is in epoch %s in this one: "+
		"either it was created again in another store (its old positions mean nothing now), or something other than orisun answers on %s.>",
		subject, ErrBadReply, event.ErrEpochChanged, boundary, prev, epoch, api.SubjectPrefix)
}

// checkAppend checks the reply to an append of n events: n consecutive
// positions from 1 up (an idempotent retry's stored positions are n
// consecutive positions too), in a real epoch.
func (c *Client) checkAppend(subject, boundary string, events []event.Input, res *event.AppendResult) error {
	n := len(events)
	if err := checkEpoch(subject, res.Epoch); err != nil {
		return err
	}
	if res.First < 1 || res.Last < res.First || res.Last-res.First+1 != uint64(n) {
		return badReply(subject, "an append of %d events answered with positions %d to %d, not %d consecutive positions from 1 up",
			n, res.First, res.Last, n)
	}
	if err := c.sameEpoch(subject, boundary, res.Epoch); err != nil {
		if slices.ContainsFunc(events, func(e event.Input) bool { return e.ID == "" }) {
			// Sent again without ids they would be appended twice.
			return fmt.Errorf("%w; the events may be stored in epoch %s at positions %d to %d: read the boundary before sending them again "+
				"(they had no ids, so a second append would store them twice)", err, res.Epoch, res.First, res.Last)
		}
		return fmt.Errorf("%w; the events may be stored in epoch %s: send them again with the same ids to learn their positions", err, res.Epoch)
	}
	return nil
}

// checkRead checks the reply to a read after position after of at most
// limit events matching q: every event of the boundary and the reply's
// epoch, after after, in ascending order, at or below the head; without a
// query the positions after+1, after+2, … (positions are dense, I1), and at
// least one event when the head is past after.
func (c *Client) checkRead(subject, boundary string, after uint64, limit int, q *event.Query, res *api.ReadReply) error {
	if err := checkEpoch(subject, res.Epoch); err != nil {
		return err
	}
	if res.Head < after {
		return badReply(subject, "head %d is before the requested position %d", res.Head, after)
	}
	if len(res.Events) > limit {
		return badReply(subject, "%d events, the request's limit is %d", len(res.Events), limit)
	}
	all := q == nil || len(q.Items) == 0
	if all && len(res.Events) == 0 && res.Head > after {
		return badReply(subject, "no events after position %d, though the head is %d", after, res.Head)
	}
	prev := after
	for i := range res.Events {
		e := &res.Events[i]
		if err := eventOfReply(subject, boundary, i, e, res); err != nil {
			return err
		}
		switch {
		case e.Position <= prev:
			return badReply(subject, "events[%d] has position %d, not after %d (positions ascend after the requested %d)", i, e.Position, prev, after)
		case all && e.Position != prev+1:
			return badReply(subject, "events[%d] has position %d, not %d: a read without a query has every position", i, e.Position, prev+1)
		case e.Position > res.Head:
			return badReply(subject, "events[%d] has position %d, beyond the head %d", i, e.Position, res.Head)
		case !q.Matches(e):
			return badReply(subject, "events[%d] (position %d, type %q) does not match the query", i, e.Position, e.Type)
		}
		prev = e.Position
	}
	return c.sameEpoch(subject, boundary, res.Epoch)
}

// eventOfReply checks that events[i] of a read's reply is of the boundary
// and of the reply's epoch.
func eventOfReply(subject, boundary string, i int, e *event.Event, res *api.ReadReply) error {
	switch {
	case e.Boundary != boundary:
		return badReply(subject, "events[%d] (position %d) is of boundary %q, not %q", i, e.Position, e.Boundary, boundary)
	case e.Epoch != res.Epoch:
		return badReply(subject, "events[%d] (position %d) is of epoch %s, the reply's is %s", i, e.Position, e.Epoch, res.Epoch)
	}
	return nil
}

// checkLatest checks the reply to a read-latest: a real epoch, and an
// event, if any, of the boundary and epoch, at or below the head, matching
// q.
func (c *Client) checkLatest(subject, boundary string, q *event.Query, res *event.Latest) error {
	if err := checkEpoch(subject, res.Epoch); err != nil {
		return err
	}
	if e := res.Event; e != nil {
		switch {
		case e.Boundary != boundary:
			return badReply(subject, "the event (position %d) is of boundary %q, not %q", e.Position, e.Boundary, boundary)
		case e.Epoch != res.Epoch:
			return badReply(subject, "the event (position %d) is of epoch %s, the reply's is %s", e.Position, e.Epoch, res.Epoch)
		case e.Position < 1 || e.Position > res.Head:
			return badReply(subject, "the event has position %d, outside 1 to the head %d", e.Position, res.Head)
		case !q.Matches(e):
			return badReply(subject, "the event (position %d, type %q) does not match the query", e.Position, e.Type)
		}
	}
	return c.sameEpoch(subject, boundary, res.Epoch)
}

// checkBoundary checks a boundary of a reply: the name asked for, when one
// was, and a real epoch.
func checkBoundary(subject, name string, b *event.Boundary) error {
	if name != "" && b.Name != name {
		return badReply(subject, "boundary %q answered for %q", truncate(b.Name), name)
	}
	if reason := badEpoch(b.Epoch); reason != "" {
		return badReply(subject, "boundary %q: %s", b.Name, reason)
	}
	return nil
}
