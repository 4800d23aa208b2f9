package orisun

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/orisun-io/orisun/internal/history"
	"github.com/orisun-io/orisun/internal/serviceutil"
)

// The console's history (docs/console.md, "Charts of the last 15
// minutes"): once a second the node writes, per boundary it runs, what it
// knows in memory — the head as it last knew it (its own appends at once,
// every boundary's head read in one statement per poll interval by
// watchHeads), and the position its leading publisher has published —
// into the boundary's ring. It never reads the store for them: these are
// the node's view, and the status stays the measured truth (I7).

// boundaryHistory is what a runner keeps for the console's charts.
type boundaryHistory struct {
	// head is the highest head this node knows of (headEpoch's).
	head      atomic.Uint64
	headEpoch atomic.Pointer[string]
	// leads is true while this node's publisher runs the boundary;
	// published the last position it had acknowledged in this term (0:
	// none yet).
	leads     atomic.Bool
	published atomic.Uint64
	// terms counts this node's terms of leading (lead), so that the
	// sampler knows a new term from the one it saw.
	terms atomic.Uint64

	ring history.Ring

	// The sampler's own state (its goroutine alone touches it).
	appRate, pubRate history.Counter
	pending          history.Pending
	// term is the term sampled last; pubKnown whether the published
	// position is known in it (once the publisher had a batch
	// acknowledged or was idle), lastPub the highest seen.
	term     uint64
	pubKnown bool
	lastPub  uint64
}

// startTerm is the lead's start: a new term, nothing published in it yet.
func (h *boundaryHistory) startTerm() {
	h.terms.Add(1)
	h.published.Store(0)
	h.leads.Store(true)
}

// noteHead records a head read from the store: a new epoch starts again,
// within one the head only grows (a read that raced an append here may
// be older than the append).
func (h *boundaryHistory) noteHead(epoch string, head uint64) {
	if e := h.headEpoch.Load(); e == nil || *e != epoch {
		h.headEpoch.Store(&epoch)
		h.head.Store(head)
		return
	}
	h.raiseHead(head)
}

// raiseHead records a head this node saw (its own append's last
// position).
func (h *boundaryHistory) raiseHead(head uint64) {
	for {
		cur := h.head.Load()
		if head <= cur || h.head.CompareAndSwap(cur, head) {
			return
		}
	}
}

// sample writes second sec of the boundary.
func (h *boundaryHistory) sample(sec int64, now time.Time, pub interface{ CaughtUp() (uint64, bool) }) {
	s := history.Sample{Appended: history.Unknown, Published: history.Unknown, LagEvents: history.UnknownLE, LagSeconds: float32(math.NaN())}
	if h.headEpoch.Load() == nil {
		// The head is not known until the node's head watch has read it
		// once: counting from 0 would draw the whole log as appended in
		// the first second.
		h.ring.Put(sec, s)
		return
	}
	head := h.head.Load()
	// The published position is known from the publisher's first
	// acknowledged batch or idle moment in the term on; between them (a
	// batch in flight) it is the highest seen, not unknown: an unknown
	// second would drop that batch from the published count.
	var published uint64
	known := false
	// Read once: the published figures and the lag's marks must follow
	// the same answer when the lead changes during the sample.
	leads := h.leads.Load()
	if leads {
		if t := h.terms.Load(); t != h.term {
			h.term, h.pubKnown, h.lastPub = t, false, 0
		}
		p := h.published.Load()
		cu, idle := pub.CaughtUp()
		if idle {
			p = max(p, cu)
		}
		if p > 0 || idle {
			h.pubKnown = true
		}
		if h.pubKnown {
			h.lastPub = max(h.lastPub, p)
			published, known = h.lastPub, true
		}
	}
	head = max(head, published)
	s.Appended = h.appRate.Rate(head)
	if leads {
		h.pending.Seen(head, now)
	} else if h.pending.Marks() > 0 {
		// Only the leader's lag in seconds reads the marks: a standby
		// node keeps none (up to history.Len marks of 16 bytes a
		// boundary otherwise, never read). On taking the lead it counts
		// the age of what is pending from then.
		h.pending.Reset()
	}
	if known {
		s.Published = h.pubRate.Rate(published)
		s.LagEvents = head - published
		s.LagSeconds = h.pending.Age(published, now)
	} else {
		h.pubRate.Reset()
	}
	h.ring.Put(sec, s)
}

// sampleHistory runs the sampler until ctx ends: one pass over the
// runners at each whole second.
func (n *Node) sampleHistory(ctx context.Context) {
	var runners []*boundaryRunner
	var last int64
	next := time.Now().Truncate(time.Second).Add(time.Second)
	for serviceutil.Sleep(ctx, time.Until(next)) {
		now := time.Now()
		next = now.Truncate(time.Second).Add(time.Second)
		if now.Unix() <= last {
			// Still the second sampled last (the clock was set back):
			// a second sample would be dropped with its counts.
			continue
		}
		last = now.Unix()
		n.rmu.RLock()
		runners = runners[:0]
		for _, r := range n.runners {
			runners = append(runners, r)
		}
		n.rmu.RUnlock()
		sec := now.Unix()
		for _, r := range runners {
			r.hist.sample(sec, now, r.pub)
		}
		clear(runners)
	}
}

// history returns the boundary's seconds after Unix second after; false
// when this node does not run the boundary.
func (n *Node) history(boundary string, after int64) (history.Series, bool) {
	r := n.runner(boundary)
	if r == nil {
		return history.Series{}, false
	}
	return r.hist.ring.After(after), true
}

// consoleSource is what the console's boundary pages read of the node
// (statushttp.ConsoleSource): its events, through the node's own
// validation, and the history.
type consoleSource struct{ *Node }

func (c consoleSource) History(boundary string, after int64) (history.Series, bool) {
	return c.history(boundary, after)
}
