package orisun

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/stream"
)

// Status is what a node reports (DESIGN §8): measured, never assumed (I7).
type Status struct {
	NodeID string `json:"node_id"`
	// LeaseHolder is this process's name as a lease holder: the node id
	// and a part unique to the process.
	LeaseHolder string           `json:"lease_holder"`
	Settled     bool             `json:"settled"`
	Boundaries  []BoundaryStatus `json:"boundaries"`
}

// BoundaryStatus is one boundary's relay state.
type BoundaryStatus struct {
	Name      string `json:"name"`
	Epoch     string `json:"epoch"`
	Head      uint64 `json:"head"`
	Published uint64 `json:"published"`
	// StreamFirst and StreamLast are the stream's first and last sequence
	// (0 when the stream is missing); StreamMsgs its message count.
	StreamFirst uint64 `json:"stream_first"`
	StreamLast  uint64 `json:"stream_last"`
	StreamMsgs  uint64 `json:"stream_msgs"`
	// LagEvents is head - published.
	LagEvents uint64 `json:"lag_events"`
	// LagSeconds is the age of the oldest unpublished event (0 when none).
	LagSeconds float64 `json:"lag_seconds"`
	// State, Reason and Since are the publisher's.
	State  publisher.State `json:"state"`
	Reason string          `json:"reason"`
	Since  time.Time       `json:"since"`
	// LeaseHolder and LeaseTerm describe the current lease.
	LeaseHolder string `json:"lease_holder"`
	LeaseTerm   uint64 `json:"lease_term"`
	// Subscriptions of this node by phase, and how often a live one went
	// back to the store.
	SubsCatchingUp int64 `json:"subscriptions_catching_up"`
	SubsLive       int64 `json:"subscriptions_live"`
	SubsFallBacks  int64 `json:"subscription_fall_backs"`
	// Error is set when a part of this status could not be measured.
	Error string `json:"error,omitempty"`
}

// Status measures every boundary. settled is true only when each boundary's
// checkpoint equals its head, both read in this call.
func (n *Node) Status(ctx context.Context) (Status, error) {
	store, js, err := n.ready()
	if err != nil {
		return Status{}, err
	}
	st := Status{NodeID: n.cfg.NodeID, LeaseHolder: n.holder, Settled: true}
	bs, err := store.Boundaries(ctx)
	if err != nil {
		return Status{}, err
	}
	for _, b := range bs {
		bst := BoundaryStatus{Name: b.Name, Epoch: b.Epoch}
		var errs []error
		// The checkpoint is read before the head: a checkpoint never passes
		// the head, so published ≤ head holds in the report even while
		// appends continue, and settled is never claimed early.
		cp, err := store.Checkpoint(ctx, b.Name)
		errs = append(errs, err)
		cur, err := store.Boundary(ctx, b.Name)
		errs = append(errs, err)
		bst.Head, bst.Published = cur.Head, cp
		if bst.Head > cp {
			bst.LagEvents = bst.Head - cp
			_, evs, err := store.Read(ctx, b.Name, cp, 1, nil)
			errs = append(errs, err)
			if len(evs) == 1 {
				bst.LagSeconds = time.Since(evs[0].Time).Seconds()
			}
		}
		if s, err := js.Stream(ctx, stream.Name(b.Name)); err == nil {
			info := s.CachedInfo()
			bst.StreamFirst, bst.StreamLast, bst.StreamMsgs = info.State.FirstSeq, info.State.LastSeq, info.State.Msgs
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
		l, err := store.LeaseHolder(ctx, b.Name)
		errs = append(errs, err)
		bst.LeaseHolder, bst.LeaseTerm = l.Holder, l.Term
		r := n.runner(b.Name)
		if r != nil {
			ps := r.pub.Status()
			bst.State, bst.Reason, bst.Since = ps.State, ps.Reason, ps.Since
			bst.SubsCatchingUp, bst.SubsLive, bst.SubsFallBacks = r.catchingUp.Load(), r.live.Load(), r.fallBacks.Load()
		} else {
			bst.State, bst.Reason = publisher.StateStandby, "no publisher on this node"
		}
		if err := errors.Join(errs...); err != nil {
			bst.Error = err.Error()
			st.Settled = false
		}
		if bst.Published != bst.Head {
			st.Settled = false
		}
		st.Boundaries = append(st.Boundaries, bst)
	}
	return st, nil
}
