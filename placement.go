package orisun

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/status"
)

// Boundary placement (several PostgreSQL nodes on a shared NATS only).
// Leases are first come, first served: without placement the first node up
// would lead every boundary while the others idle. Every third of a lease
// TTL each node writes a heartbeat into the store (orisun_nodes, in the
// database's clock) and counts the live nodes: those whose heartbeat is
// fresher than one lease TTL. It takes ceil(boundaries / nodes) as its fair
// share. A node at its share leaves free leases to the others
// (lease.Runner.Yield); a node above it gives up one lease per round
// (lease.Runner.StepDown), which a node below its share takes. When a node
// leaves, the others count one node fewer, their share grows and they take
// its boundaries: at once when it stopped cleanly (it deletes its row
// before it releases its leases, and a standby woken by a release counts
// again before it decides), after a TTL when it died, lost its store or
// its NATS connection (it stops beating). Nodes
// are counted in the store, not over NATS: a node whose store is down
// cannot hold a lease, so it must not be counted as taking a share.
//
// Placement is a hint and never safety (docs/design.md §9): a wrong count only makes
// a lease change hands more or less than needed, and a yielding node
// acquires anyway after two attempts, so a boundary is never left without a
// publisher for long.

// nodeRegistry is what placement needs from the store: the table of live
// nodes (PostgreSQL, backend/postgres/nodes.go).
type nodeRegistry interface {
	// Heartbeat also names twin: another live process with this node id.
	// And alive: those of gone that beat after this process's first
	// heartbeat (backend/postgres, Store.Heartbeat).
	Heartbeat(ctx context.Context, holder, nodeID string, gone []string, ttl time.Duration) (live int, twin string, alive []string, err error)
	RemoveNode(ctx context.Context, holder string) error
}

// placement writes this node's heartbeat and recomputes the fair share
// every third of a lease TTL, and at once when a lease runner asks
// (recount), until ctx ends or stop is closed. A heartbeat in flight is
// not cut short by stop: one that the database finished after this node's
// row was removed (leave) would write the row again. Only a round of the
// ticker lets a lease step down: a node above its share gives up one
// lease per round, however often it counts.
func (n *Node) placement(ctx context.Context, stop <-chan struct{}, reg nodeRegistry) {
	log := n.log.With("component", "placement")
	tick := time.NewTicker(max(n.cfg.LeaseTTL/3, 50*time.Millisecond))
	defer tick.Stop()
	n.countMu.Lock()
	n.counted = make(chan struct{})
	n.countMu.Unlock()
	defer func() {
		// Whoever waits for a count waits no more.
		n.countMu.Lock()
		close(n.counted)
		n.counted = nil
		n.countMu.Unlock()
	}()
	failing := false
	ticked := true // the first round is a round of its own
	var twins twinWatch
	for {
		// A recount that asked before this point is answered by this
		// round (see recount).
		n.countMu.Lock()
		counted := n.counted
		n.counted = make(chan struct{})
		n.countMu.Unlock()
		var nodes int
		var twin string
		var err error
		if n.nc.IsConnected() {
			hctx, cancel := context.WithTimeout(ctx, n.cfg.LeaseTTL)
			var alive []string
			nodes, twin, alive, err = reg.Heartbeat(hctx, n.holder, n.cfg.NodeID, n.goneHolders(), n.cfg.LeaseTTL)
			cancel()
			if err == nil {
				n.watchTwin(&twins, twin)
				n.withdrawGone(alive)
			}
		} else {
			// A node that cannot reach NATS cannot publish: it stops
			// beating, so the others stop counting it and take its share
			// (its stalled publishers step down, see newBoundaryRunner).
			err = errors.New("not connected to NATS")
		}
		switch {
		case ctx.Err() != nil:
			close(counted) // no count, but nobody waits for one
			return
		case err != nil:
			// Without a count, no yielding and no stepping down: this
			// node cannot hold leases while its store fails anyway.
			if !failing {
				log.Warn("placement: heartbeat failing; not counting nodes until it works", "err", err)
				failing = true
			}
			nodes = 0
		case failing:
			log.Info("placement: heartbeat works again", "live_nodes", nodes)
			failing = false
		}
		n.liveNodes.Store(int64(nodes))
		n.rmu.RLock()
		boundaries := len(n.runners)
		n.rmu.RUnlock()
		if nodes < 1 || boundaries < 1 {
			n.fair.Store(0)
		} else {
			n.fair.Store(int64((boundaries + nodes - 1) / nodes))
			if ticked {
				n.stepDown.Store(true)
			}
		}
		close(counted)
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
			ticked = true
		case <-n.countNow:
			ticked = false
		}
	}
}

// recount is the lease runners' Recount (lease.Runner): it asks placement
// for a count begun after this call and waits for it, for ctx's end or for
// placement's. A standby woken by a released lease counts again before it
// asks whether to yield: a node that stops cleanly removed its heartbeat
// before it released its leases (leave), so the count has one node fewer,
// the share has grown, and the standby takes the lease at once instead of
// a round later. Wake-ups at once share one count.
func (n *Node) recount(ctx context.Context) {
	n.countMu.Lock()
	counted := n.counted
	n.countMu.Unlock()
	if counted == nil {
		return // placement does not run (yet, or any more)
	}
	select {
	case n.countNow <- struct{}{}:
	default: // a count is asked for already
	}
	select {
	case <-counted:
	case <-ctx.Done():
	}
}

// leave takes this node out of placement on a clean stop, before its
// leases are released: placement stops (no heartbeat writes the row again)
// and the row is deleted, so the others stop counting this node at once and
// take its boundaries as the releases wake them (recount).
func (n *Node) leave() {
	if n.stopPlacement != nil {
		n.stopPlacement()
	}
	n.removeNode()
}

// removeNode deletes this node's heartbeat row.
func (n *Node) removeNode() {
	if n.registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.registry.RemoveNode(ctx, n.holder); err != nil {
		n.log.Warn("placement: heartbeat row not removed; the others stop counting this node after a lease TTL", "err", err)
	}
}

// placementStatus is this node's view of placement for the status (nil
// when placement is off).
func (n *Node) placementStatus() *status.Placement {
	if n.registry == nil {
		return nil
	}
	return &status.Placement{LiveNodes: int(n.liveNodes.Load()), FairShare: int(n.fair.Load()), Leading: int(n.leading.Load())}
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

// twinWatch is what placement remembers about twins between heartbeats.
type twinWatch struct {
	last     string          // the twin seen at the previous heartbeat
	reported map[string]bool // twins already logged
}

// watchTwin reports another live process using this node's id, found by a
// heartbeat: most likely a copy of this node's data directory, node-id file
// included. In an embedded NATS cluster the node id is the server's name,
// so the two servers refuse each other's routes ("duplicate name") and
// their JetStream peers collide, without anything else saying why. A twin
// counts once seen at two heartbeats in a row (a process still stopping as
// this one starts is not one); it is logged once, at ERROR, and shown in
// the status while it lives.
func (n *Node) watchTwin(w *twinWatch, twin string) {
	seen := twin != "" && twin == w.last
	w.last = twin
	if !seen {
		if twin == "" {
			n.warning.Store(nil)
		}
		return
	}
	var msg string
	if n.idFile != "" {
		msg = fmt.Sprintf("node id %q is also used by another live process (lease holder %s) on this database: its data directory "+
			"was most likely copied from this node's, node id file %s included; in an embedded NATS cluster the two servers share "+
			"a name, so their routes are refused and their JetStream peers collide. Stop the copy, delete the node-id file in its "+
			"data directory (a new id is generated at its next start) and its LOCK file, or give each node a distinct ORISUN_NODE_ID",
			n.cfg.NodeID, twin, n.idFile)
	} else {
		msg = fmt.Sprintf("node id %q is also used by another live process (lease holder %s) on this database: ORISUN_NODE_ID "+
			"is set to the same value on two nodes; in an embedded NATS cluster the two servers share a name, so their routes "+
			"are refused and their JetStream peers collide. Give each node a distinct ORISUN_NODE_ID", n.cfg.NodeID, twin)
	}
	n.warning.Store(&msg)
	if w.reported == nil {
		w.reported = map[string]bool{}
	}
	if !w.reported[twin] {
		w.reported[twin] = true
		n.log.Error(msg, "node_id", n.cfg.NodeID, "node_id_file", n.idFile, "twin", twin)
	}
}

// goneHolders is the lease runners' Gone (lease.Runner): the holders of the
// data directory's earlier processes, whose leases this node takes at
// once, less those found alive (withdrawGone).
func (n *Node) goneHolders() []string {
	n.goneMu.Lock()
	defer n.goneMu.Unlock()
	return n.gone
}

// withdrawGone stops taking the leases of the earlier holders found alive
// early. A holder the data directory's lock file names held the lock
// before this process, so it has ended, unless the lock file was copied
// with the directory from a node that still runs: a cloned volume keeps
// the file's inode number, so the lock file cannot tell (internal/datadir).
// That holder's heartbeat, written after this process's first one (which
// came after it took the lock), proves it alive: from then on its leases
// are left to expire, as any live node's are. Those this node took at its
// start are not handed back; the term fences the original's writes (I6).
func (n *Node) withdrawGone(alive []string) {
	if len(alive) == 0 {
		return
	}
	n.goneMu.Lock()
	var withdrawn []string
	n.gone = slices.DeleteFunc(slices.Clone(n.gone), func(h string) bool {
		if slices.Contains(alive, h) {
			withdrawn = append(withdrawn, h)
			return true
		}
		return false
	})
	n.goneMu.Unlock()
	for _, h := range withdrawn {
		n.log.Warn("an earlier holder named in the data directory's lock file is alive: it wrote a heartbeat after this process "+
			"locked the directory, so the directory was copied with its lock file from a node that still runs (a cloned volume "+
			"keeps inode numbers); its leases are no longer taken early. Delete LOCK and node-id in a copied data directory",
			"holder", h, "lock_file", filepath.Join(n.cfg.DataDir, datadir.LockFile))
	}
}
