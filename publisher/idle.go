// Idle: what a caught-up publisher waits for, and why the status says
// there is nothing to publish (a held head row is reported, I7); Behind lets
// the node wake only the publishers that have events to read.

package publisher

import (
	"context"
	"time"

	"github.com/orisun-io/orisun/backend"
)

// Behind reports whether the publisher waits, caught up, for new events
// while h (read from the store after it became idle) says the boundary has
// events it has not read, has another epoch, or has its head row held by
// an open transaction (so that the publisher probes the row and the status
// can say it waits, I7). A node reads every boundary's head in one
// statement per poll interval and wakes only the publishers that are
// behind; a wake-up lost in between (the publisher became idle just after
// the read) is caught by the next read, or by the publisher's own poll
// (I4).
func (p *Publisher) Behind(h backend.Head) bool {
	if !p.idle.Load() {
		return false // it runs (and reads again before it waits), or it does not lead
	}
	if e := p.epoch.Load(); e != nil && *e != h.Boundary.Epoch {
		return true
	}
	return h.Held || h.Boundary.Head > p.caughtUp.Load()
}

// idleWait is how long an idle publisher waits for a wake-up: PollInterval,
// unless a probe of the head row is due sooner (the last idle moment
// skipped it, or the row was seen held), so that a held row is still seen
// twice and reported (I7) when the poll is a long backstop.
func (r *run) idleWait() time.Duration {
	wait := r.p.cfg.PollInterval
	if _, ok := r.p.cfg.Store.(HeadProber); !ok {
		return wait
	}
	if !r.heldSince.IsZero() {
		return min(wait, r.p.cfg.ProbeInterval)
	}
	if r.probeSkipped {
		return min(wait, max(time.Until(r.probed.Add(r.p.cfg.ProbeInterval)), time.Millisecond))
	}
	return wait
}

// idleReason says why there is nothing to publish. An append transaction
// that holds the head row across two looks (ProbeInterval or more apart)
// is reported with the time it was first seen: its events get positions
// only when it commits, so the publisher waits and skips nothing.
//
// The probe runs at most once per ProbeInterval: on PostgreSQL it is a row
// lock (FOR SHARE NOWAIT), a write with a commit of its own, and a
// publisher that drains and idles hundreds of times a second under a steady
// trickle of appends made one per idle moment, competing with the appends
// it relays. Between probes a "caught up" answer stands; a head row seen
// held is probed again at every idle moment, so "waiting" ends as soon as
// the append commits.
func (r *run) idleReason(ctx context.Context) string {
	const caughtUp = "caught up: every committed event is published"
	prober, ok := r.p.cfg.Store.(HeadProber)
	if !ok {
		return caughtUp
	}
	if !r.probed.IsZero() && r.heldSince.IsZero() && time.Since(r.probed) < r.p.cfg.ProbeInterval {
		r.probeSkipped = true
		return r.lastReason // not held at the last probe: caught up
	}
	r.probeSkipped = false
	r.probed = time.Now()
	r.lastReason = r.probeReason(ctx, prober)
	return r.lastReason
}

func (r *run) probeReason(ctx context.Context, prober HeadProber) string {
	const caughtUp = "caught up: every committed event is published"
	held, err := prober.HeadLocked(ctx, r.p.cfg.Boundary)
	if err != nil || !held {
		r.heldSince = time.Time{}
		return caughtUp
	}
	now := time.Now().UTC()
	if r.heldSince.IsZero() {
		r.heldSince = now
	}
	if now.Sub(r.heldSince) < r.p.cfg.ProbeInterval {
		return caughtUp
	}
	return "waiting: an append transaction has held the boundary's head row since " +
		r.heldSince.Format(time.RFC3339) + "; its events get positions when it commits, nothing is skipped meanwhile"
}
