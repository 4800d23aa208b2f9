// Idle: what a caught-up publisher waits for, and why the status says
// there is nothing to publish (a held head row is reported, I7); Behind lets
// the node wake only the publishers that have events to read.

package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/orisun-io/orisun/backend"
)

// Behind reports whether the publisher waits, caught up, for new events
// while h (read from the store after it became idle) says the boundary has
// events it has not read, has fewer than it published, has another epoch,
// or has its head row held by
// an open transaction (so that the publisher probes the row and the status
// can say it waits, I7). A node reads every boundary's head in one
// statement per poll interval and wakes only the publishers that are
// behind; a wake-up lost in between (the publisher became idle just after
// the read) is caught by the next read, or by the publisher's own poll
// (I4).
func (p *Publisher) Behind(h backend.Head) bool {
	if !p.idle.Load() {
		return false // it runs (it reads again, or awaits acknowledgements and then a pending wake-up), or it does not lead
	}
	if e := p.epoch.Load(); e != nil && *e != h.Boundary.Epoch {
		return true
	}
	if h.Boundary.Head < p.caughtUp.Load() {
		// A head below what it published: the store went back (restored
		// from a backup), or h was read before the publisher's last
		// batch. Woken, the publisher reads the head itself (headWentBack).
		p.checkHead.Store(true)
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
// only when it commits, so the publisher waits and skips nothing. The same
// transaction must hold it at both looks (a transaction holds its row lock
// until it ends, so it held the row all along): short transactions that
// take the row one after another, each seen by one look, are a busy
// boundary, not a held one (I7).
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
	holder, err := prober.HeadHolder(ctx, r.p.cfg.Boundary)
	if err != nil || holder == "" {
		r.heldSince, r.heldBy = time.Time{}, ""
		return caughtUp
	}
	now := time.Now().UTC()
	if r.heldSince.IsZero() || holder != r.heldBy {
		r.heldSince, r.heldBy = now, holder
	}
	if now.Sub(r.heldSince) < r.p.cfg.ProbeInterval {
		return caughtUp
	}
	return "waiting: an append transaction has held the boundary's head row since " +
		r.heldSince.Format(time.RFC3339) + " (transaction " + holder + ", the row's xmax); " +
		"its events get positions when it commits, nothing is skipped meanwhile"
}

// headWentBack reads the boundary's head when Behind asked for it, and
// returns a *driftError when the head is below next-1, the last position
// this publisher published: the store went back in time (restored from an
// older backup), and the stream holds events the store does not. The sync
// it sends the run to stalls on that (I7) instead of the status calling a
// publisher caught up whose stream is ahead of the store.
func (r *run) headWentBack(ctx context.Context, next uint64) error {
	if !r.p.checkHead.Swap(false) {
		return nil
	}
	b, err := r.p.cfg.Store.Boundary(ctx, r.p.cfg.Boundary)
	if err != nil || b.Epoch != r.epoch || b.Head >= next-1 {
		return nil // an epoch change, or a read error, is met by the next read
	}
	return &driftError{fmt.Sprintf("the store's head is %d, below %d, the last position this publisher published: "+
		"the store went back (restored from an older backup?); comparing the stream with the store", b.Head, next-1)}
}

// CaughtUp returns the position the publisher had read up to when it last
// became idle, and whether it is idle now (waiting, caught up, for a
// wake-up). The status compares it with the head it measured, so that a
// commit the publisher was not told of yet is not reported as published.
func (p *Publisher) CaughtUp() (pos uint64, idle bool) {
	idle = p.idle.Load() // read before caughtUp, which is stored before idle is set
	return p.caughtUp.Load(), idle
}
