package orisun

import (
	"context"
	"encoding/json"
	"time"

	"github.com/orisun-io/orisun/api"
)

// Boundary placement (shared NATS only). Leases are first come, first
// served: without placement the first node up would lead every boundary
// while the others idle. Every third of a lease TTL each node counts the
// live nodes (the instances of the "orisun" micro service answering a
// PING over the shared NATS) and the boundaries, and takes
// ceil(boundaries / nodes) as its fair share. A node at its share leaves
// free leases to the others (lease.Runner.Yield); a node above it gives up
// one lease per round (lease.Runner.StepDown), which a node below its share
// takes. When a node leaves, the others count one node fewer, their share
// grows and they take its boundaries.
//
// Placement is a hint and never safety (DESIGN §9): a wrong count only makes
// a lease change hands more or less than needed, and a yielding node
// acquires anyway after two attempts, so a boundary is never left without a
// publisher for long.

// placement recomputes the fair share until ctx ends.
func (n *Node) placement(ctx context.Context) {
	tick := time.NewTicker(max(n.cfg.LeaseTTL/3, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		nodes := n.countNodes(ctx)
		n.rmu.RLock()
		boundaries := len(n.runners)
		n.rmu.RUnlock()
		if nodes < 1 || boundaries < 1 {
			n.fair.Store(0)
			continue
		}
		n.fair.Store(int64((boundaries + nodes - 1) / nodes))
		n.stepDown.Store(true)
	}
}

// countNodes counts the orisun nodes answering a micro service PING within
// a short window (0 when it cannot tell). Each node serves the API as one
// instance of the service.
func (n *Node) countNodes(ctx context.Context) int {
	nc := n.nc
	if nc == nil {
		return 0
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING."+api.ServiceName, inbox, nil); err != nil {
		return 0
	}
	ids := map[string]bool{}
	wait := 250 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, wait)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			break
		}
		var ping struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(msg.Data, &ping) == nil && ping.ID != "" {
			ids[ping.ID] = true
		}
		wait = 100 * time.Millisecond // the others answer about together
	}
	return len(ids)
}

// yield reports whether this node leads its fair share already.
func (n *Node) yield() bool {
	f := n.fair.Load()
	return f > 0 && n.leading.Load() >= f
}

// takeStepDown reports whether this node leads more than its share and may
// give one lease up in this round.
func (n *Node) takeStepDown() bool {
	f := n.fair.Load()
	return f > 0 && n.leading.Load() > f && n.stepDown.CompareAndSwap(true, false)
}
