package orisun

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// Status is what a node reports (DESIGN §8); see package status.
type (
	Status         = status.Status
	BoundaryStatus = status.BoundaryStatus
)

// Status measures every boundary. settled is true only when each boundary's
// checkpoint equals its head, both read in this call.
func (n *Node) Status(ctx context.Context) (Status, error) {
	store, js, err := n.ready()
	if err != nil {
		return Status{}, err
	}
	st := Status{NodeID: n.cfg.NodeID, LeaseHolder: n.holder, Version: n.version, Time: time.Now().UTC(), Settled: true}
	st.Store = status.Health{OK: true, Kind: n.cfg.Backend}
	st.NATS = status.Health{OK: true, Kind: "embedded"}
	if _, err := js.AccountInfo(ctx); err != nil {
		st.NATS.OK, st.NATS.Error = false, "JetStream: "+err.Error()
		st.Settled = false
	}
	bs, err := store.Boundaries(ctx)
	if err != nil {
		// The store does not answer: report what this node knows without
		// it (its publishers' states), and nothing it would have to guess.
		st.Store.OK, st.Store.Error = false, err.Error()
		st.Settled = false
		for _, name := range n.runnerNames() {
			bst := BoundaryStatus{Name: name, Error: "not measured: the store does not answer: " + err.Error()}
			n.localStatus(&bst)
			st.Boundaries = append(st.Boundaries, bst)
		}
		return st, nil
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
				bst.LagSeconds = max(0, time.Since(evs[0].Time).Seconds())
			}
		}
		if s, err := js.Stream(ctx, stream.Name(b.Name)); err == nil {
			info := s.CachedInfo()
			bst.StreamFirst, bst.StreamLast = info.State.FirstSeq, info.State.LastSeq
			bst.StreamMsgs, bst.StreamBytes = info.State.Msgs, info.State.Bytes
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
		l, err := store.LeaseHolder(ctx, b.Name)
		errs = append(errs, err)
		bst.LeaseHolder, bst.LeaseTerm, bst.LeaseExpires = l.Holder, l.Term, l.Expires
		n.localStatus(&bst)
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

// localStatus fills in what this node's own parts know of the boundary: its
// publisher's state and its subscriptions.
func (n *Node) localStatus(bst *BoundaryStatus) {
	r := n.runner(bst.Name)
	if r == nil {
		bst.State, bst.Reason = publisher.StateStandby, "no publisher on this node"
		return
	}
	ps := r.pub.Status()
	bst.State, bst.Reason, bst.Since = ps.State, ps.Reason, ps.Since
	bst.SubsCatchingUp, bst.SubsLive, bst.SubsFallBacks = r.catchingUp.Load(), r.live.Load(), r.fallBacks.Load()
}

// runnerNames lists the boundaries this node runs a publisher for, sorted.
func (n *Node) runnerNames() []string {
	n.rmu.RLock()
	names := make([]string, 0, len(n.runners))
	for name := range n.runners {
		names = append(names, name)
	}
	n.rmu.RUnlock()
	slices.Sort(names)
	return names
}
