package client

import (
	"context"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// ReadBackward returns up to limit events below position before (0: from
// the head), newest first (1 ≤ limit ≤ 10,000), matching q when it is not
// nil: the log as a person browses it. The next page is below the last
// position returned; the start is reached when a page is empty (without a
// query: or its last position is 1). As with Read, a page may hold fewer
// events than limit though more exist (it must fit one NATS message; the
// oldest are left out), a reply that cannot be the answer (see ErrBadReply:
// events not in descending order, not below before, beyond the head, of
// another boundary or epoch, not matching q, a position missing from a
// read without a query) is an error, and a read that reaches a stored row
// that does not fit the log fails with event.ErrCorrupt naming it.
func (c *Client) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (api.ReadReply, error) {
	var res api.ReadReply
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return res, err
	}
	subject := api.ReadSubject(boundary)
	req := api.ReadRequest{Backwards: true, Before: before, Limit: &limit, Query: q}
	if err := c.request(ctx, subject, req, &res); err != nil {
		return res, badRow(err, boundary)
	}
	if err := c.checkReadBackward(subject, boundary, before, limit, q, &res); err != nil {
		return api.ReadReply{}, err
	}
	return res, nil
}

// checkReadBackward checks the reply to a backward read below position
// before (0: from the head) of at most limit events matching q: every event
// of the boundary and the reply's epoch, below before, in descending order,
// at or below the head; without a query the positions top, top-1, … where
// top is before-1 or the head, whichever is lower (positions are dense,
// I1), and at least one event when top is past 0.
func (c *Client) checkReadBackward(subject, boundary string, before uint64, limit int, q *event.Query, res *api.ReadReply) error {
	if err := checkEpoch(subject, res.Epoch); err != nil {
		return err
	}
	if len(res.Events) > limit {
		return badReply(subject, "%d events, the request's limit is %d", len(res.Events), limit)
	}
	top := res.Head
	if before > 0 && before-1 < top {
		top = before - 1
	}
	all := q == nil || len(q.Items) == 0
	if all && len(res.Events) == 0 && top > 0 {
		return badReply(subject, "no events below position %d, though the head is %d", top+1, res.Head)
	}
	next := top // the highest position the next event may have
	for i := range res.Events {
		e := &res.Events[i]
		if err := eventOfReply(subject, boundary, i, e, res); err != nil {
			return err
		}
		switch {
		case e.Position > res.Head:
			return badReply(subject, "events[%d] has position %d, beyond the head %d", i, e.Position, res.Head)
		case before > 0 && e.Position >= before:
			return badReply(subject, "events[%d] has position %d, not below the requested %d", i, e.Position, before)
		case e.Position > next || e.Position == 0:
			return badReply(subject, "events[%d] has position %d, not below %d (a backward read's positions descend)", i, e.Position, next+1)
		case all && e.Position != next:
			return badReply(subject, "events[%d] has position %d, not %d: a read without a query has every position", i, e.Position, next)
		case !q.Matches(e):
			return badReply(subject, "events[%d] (position %d, type %q) does not match the query", i, e.Position, e.Type)
		}
		next = e.Position - 1
	}
	return c.sameEpoch(subject, boundary, res.Epoch)
}
