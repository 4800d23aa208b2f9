package client

import (
	"context"
	"errors"
	"time"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/catchup"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/status"
)

// Handler processes one event; its return acknowledges it.
type Handler = event.Handler

// SubscribeOptions are those of the in-process subscription: the epoch
// of the start position, and the caught-up / fell-behind callbacks.
type SubscribeOptions = event.SubscribeOptions

// Subscribe delivers the boundary's events after position after to h,
// exactly once each and in order, reading through the API and then
// following the boundary's stream (docs/design.md §7, I5). It returns when ctx ends
// (ctx's error), h fails, the epoch changes (event.ErrEpochChanged), the
// start position is beyond the head or the boundary does not exist
// (event.ErrInvalid, event.ErrNotFound), the next event's stored row does
// not fit the log (event.ErrCorrupt, with an *event.CorruptError naming its
// position, after every event before it), or the client is closed.
func (c *Client) Subscribe(ctx context.Context, boundary string, after uint64, h Handler, opts SubscribeOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A closed client ends the subscription instead of retrying forever.
	go func() {
		for serviceutil.Sleep(ctx, 200*time.Millisecond) {
			if c.nc.IsClosed() {
				cancel()
				return
			}
		}
	}()
	err := catchup.Subscribe(ctx, catchup.Config{
		Store:  &pageReader{c: c},
		JS:     c.js,
		Live:   func() bool { return c.live(ctx, boundary) },
		Logger: c.log.With("component", "subscription"),
	}, boundary, after, h, opts)
	if c.nc.IsClosed() && errors.Is(err, context.Canceled) {
		return event.ErrClosed
	}
	return err
}

// live reports whether the boundary's stream is fed: its publisher leads on
// the node that answers or, with a NATS the nodes share (an embedded
// cluster or an external deployment, where the stream is the same on every
// node and any node may answer), some node holds the boundary's lease as
// the answering node saw it. When that cannot be asked, it is not (the
// store is read instead): a wrong "no" costs a read, a wrong "yes" would
// wait on a stream nobody feeds until the next answer. The answer is
// shared by all the client's subscriptions for a second, so that many
// subscriptions cost one status request a second, not one each every time
// they wake.
func (c *Client) live(ctx context.Context, boundary string) bool {
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if time.Since(c.liveAt) >= time.Second {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(ctx)
		cancel()
		c.leading, c.liveAt = map[string]bool{}, time.Now()
		if err == nil {
			for _, b := range st.Boundaries {
				c.leading[b.Name] = fed(st, b)
			}
		}
	}
	return c.leading[boundary]
}

// fed reports whether a status says the boundary's stream is being fed.
// With a shared NATS the lease of another node stands for that node's
// publisher: its expiry is in
// the store's clock and st.Time in the node's, so a skew between the two
// only moves the moment the hint turns, as it does for the node's own
// subscriptions (the lease loop reads the same row).
func fed(st Status, b BoundaryStatus) bool {
	if b.State == status.StateLeading {
		return true
	}
	if b.LeaseHolder == st.LeaseHolder {
		// The answering node holds the lease: its publisher's state
		// (stalled, paused) is the answer.
		return false
	}
	shared := st.NATS.Kind == "embedded-cluster" || st.NATS.Kind == "external"
	return shared && b.LeaseHolder != "" && b.LeaseExpires.After(st.Time)
}

// pageReader is the subscription's Reader: the API's read, with two
// differences that the state machine relies on. A page is filled up to the
// limit across replies cut short by the NATS max payload, so that a short
// page means "the head was reached". And failures that may pass
// (unavailable, timeouts, no responders during a relay restart, internal)
// are retried here with a growing pause, so the subscription outlives
// them; only errors that retrying cannot fix reach the state machine.
type pageReader struct{ c *Client }

func (r *pageReader) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	var (
		epoch string
		out   []event.Event
		pause time.Duration
	)
	for {
		res, err := r.c.Read(ctx, boundary, after, min(limit-len(out), api.MaxReadLimit), q)
		if err != nil {
			if ctx.Err() != nil {
				return "", nil, ctx.Err()
			}
			if !retryable(err) {
				return "", nil, err
			}
			if len(out) > 0 {
				// What was read is good: deliver it; the next read
				// retries.
				return epoch, out, nil
			}
			pause = min(max(2*pause, 100*time.Millisecond), 5*time.Second)
			r.c.log.Warn("read failed; retrying", "boundary", boundary, "after", after, "pause", pause, "err", err)
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", nil, ctx.Err()
			case <-t.C:
			}
			continue
		}
		pause = 0
		if epoch == "" {
			epoch = res.Epoch
		} else if res.Epoch != epoch {
			// The epoch changed between two replies: hand over what
			// belongs to the first; the next read reports the change.
			return epoch, out, nil
		}
		out = append(out, res.Events...)
		n := len(res.Events)
		if n == 0 || len(out) >= limit || res.Events[n-1].Position >= res.Head {
			return epoch, out, nil
		}
		after = res.Events[n-1].Position
	}
}

// retryable reports whether an error may pass by itself.
func retryable(err error) bool {
	if errors.Is(err, event.ErrClosed) {
		return false
	}
	if errors.Is(err, ErrBadReply) && errors.Is(err, event.ErrEpochChanged) {
		// The client's memory of the boundary's epoch, from replies
		// before this subscription, changed: the next read compares with
		// the new epoch, and the subscription checks every page against
		// its own epoch (docs/design.md §7), so a reset boundary ends it
		// there, with its own ErrEpochChanged, and only there.
		return true
	}
	switch api.CodeOf(err) {
	case api.CodeUnavailable, api.CodeInternal:
		return true
	}
	return false
}
