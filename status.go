package orisun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// Status is what a node reports (docs/design.md §8); see package status.
type (
	Status         = status.Status
	BoundaryStatus = status.BoundaryStatus
)

// Status measures every boundary. settled is true only when each boundary's
// checkpoint equals its head, both read in this call, no stream holds a
// sequence beyond its head or of another epoch (see streamDrift), and no
// kind of store work is failing (storewatch.go).
func (n *Node) Status(ctx context.Context) (Status, error) {
	store, js, err := n.ready()
	if err != nil {
		return Status{}, err
	}
	st := n.measure(ctx, store, js)
	if n.watch == nil {
		return st, nil
	}
	// The store's writes may fail while it answers every read of this
	// measurement (a full disk): what the node saw of them decides too.
	ok, since, what, readsFail := n.watch.health()
	if !ok {
		measured := st.Store.Error
		st.Store.OK, st.Store.Error, st.Store.Since = false, what, since
		if measured != "" && !readsFail {
			st.Store.Error = measured + "; " + what
		}
		st.Settled = false
	}
	return st, nil
}

// measure is Status's measurement of the store and the streams.
func (n *Node) measure(ctx context.Context, store backend.Store, js jetstream.JetStream) Status {
	st := Status{NodeID: n.cfg.NodeID, LeaseHolder: n.holder, Version: n.version, Time: time.Now().UTC(), Settled: true,
		Placement: n.placementStatus()}
	if w := n.warning.Load(); w != nil {
		st.Warning = *w
	}
	st.Store = status.Health{OK: true, Kind: n.cfg.Backend}
	st.NATS = status.Health{OK: true, Kind: n.natsKind()}
	// NATS gets a budget of its own, so that a slow JetStream is reported
	// as such and does not eat the store's time (and the other way round).
	nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := js.AccountInfo(nctx)
	cancel()
	if err != nil {
		st.NATS.OK, st.NATS.Error = false, "JetStream: "+err.Error()
		st.Settled = false
	}
	storeDown := func(err error) {
		if st.Store.OK {
			st.Store.OK, st.Store.Error = false, err.Error()
		}
		st.Settled = false
	}
	bs, err := store.Boundaries(ctx)
	if err != nil {
		// The store does not answer: report what this node knows without
		// it (its publishers' states), and nothing it would have to guess.
		storeDown(err)
		for _, name := range n.runnerNames() {
			bst := BoundaryStatus{Name: name, Error: "not measured: the store does not answer: " + err.Error()}
			n.localStatus(&bst)
			st.Boundaries = append(st.Boundaries, bst)
		}
		return st
	}
	// The staged events are read before the heads: a move that commits
	// between the two reads then shows its events twice (staged, and
	// under the head), which is not settled, rather than nowhere (the
	// head read before the move, the staging after it), which read as
	// settled with committed events unpublished (I7).
	staged, err := n.measureStaged(ctx)
	if err != nil {
		// Every other figure stands; the staged counts are not known, so
		// the report cannot say that nothing waits.
		storeDown(fmt.Errorf("staged events (orisun_enqueue) not measured: %w", err))
	}
	// A store that measures every boundary in one statement is asked
	// once: four queries per boundary made the status of a node with 1,000
	// boundaries take 12 s on PostgreSQL (docs/performance.md).
	var states map[string]backend.BoundaryState
	if sr, ok := store.(backend.StateReader); ok {
		// On an error every boundary is measured on its own, which says
		// which of them fail.
		if all, err := sr.BoundaryStates(ctx); err == nil {
			states = make(map[string]backend.BoundaryState, len(all))
			for _, s := range all {
				states[s.Boundary.Name] = s
			}
		}
	}
	// The store's figures of every boundary first, then the streams'
	// figures in one listing: each boundary's stream is read after its
	// store figures, as streamDrift needs.
	all := make([]BoundaryStatus, len(bs))
	for i, b := range bs {
		bst := &all[i]
		*bst = BoundaryStatus{Name: b.Name, Epoch: b.Epoch}
		var err error
		if s, ok := states[b.Name]; ok {
			fromState(bst, s)
		} else {
			err = n.measureStore(ctx, store, bst)
		}
		if err != nil {
			bst.Error = "not measured: " + err.Error()
			storeDown(err)
		} else if bst.Published != bst.Head {
			st.Settled = false
		}
		if s, ok := staged[b.Name]; ok {
			// Committed staged events are committed work that is not
			// published yet: not settled (I7).
			fromStaged(bst, s)
			if s.Staged > 0 {
				st.Settled = false
			}
		}
		if n.beforeStreamMeasured != nil && st.NATS.OK {
			n.beforeStreamMeasured(b.Name)
		}
	}
	var infos map[string]*jetstream.StreamInfo
	if st.NATS.OK {
		// One paged listing (a JetStream request per 256 streams) instead
		// of a stream-info request per boundary: with 1,000 boundaries
		// those were most of a measurement's time (docs/console.md).
		// Should it fail, each stream is read on its own, which says
		// which of them fail.
		infos = listStreams(ctx, js)
	}
	var unlisted map[string]streamRead
	if st.NATS.OK {
		unlisted = readUnlisted(ctx, js, infos, all)
	}
	for i := range all {
		bst := &all[i]
		var drift []string
		if !st.NATS.OK {
			bst.StreamError = "not measured: NATS does not answer"
		} else if info, err := streamOf(infos, unlisted, bst); err != nil {
			bst.StreamError = "not measured: " + err.Error()
			// Settled promises that nothing failed to be measured: a
			// stream not read may hold what the store does not (I7).
			st.Settled = false
		} else if info != nil && bst.Error == "" {
			var unsettled bool
			drift, unsettled = n.streamDrift(ctx, store, bst, info)
			if unsettled {
				st.Settled = false
			}
		}
		n.localStatus(bst)
		bst.Warning = joinWarnings(drift, bst.Warning)
	}
	st.Boundaries = append(st.Boundaries, all...)
	return st
}

// measureStore reads the boundary's checkpoint, head, oldest unpublished
// event and lease. On an error the figures stay zero: nothing is guessed.
func (n *Node) measureStore(ctx context.Context, store backend.Store, bst *BoundaryStatus) error {
	// The checkpoint is read before the head: a checkpoint never passes
	// the head, so published ≤ head holds in the report even while appends
	// continue, and settled is never claimed early.
	cp, err := store.Checkpoint(ctx, bst.Name)
	if err != nil {
		return err
	}
	cur, err := store.Boundary(ctx, bst.Name)
	if err != nil {
		return err
	}
	var age float64
	if cur.Head > cp {
		_, evs, err := store.Read(ctx, bst.Name, cp, 1, nil)
		if err != nil {
			return err
		}
		if len(evs) == 1 {
			age = max(0, time.Since(evs[0].Time).Seconds())
		}
	}
	l, err := store.LeaseHolder(ctx, bst.Name)
	if err != nil {
		return err
	}
	bst.Head, bst.Published, bst.LagEvents, bst.LagSeconds = cur.Head, cp, cur.Head-cp, age
	bst.LeaseHolder, bst.LeaseTerm, bst.LeaseExpires = l.Holder, l.Term, l.Expires
	return nil
}

// fromState fills the store's figures from a bulk measurement.
func fromState(bst *BoundaryStatus, s backend.BoundaryState) {
	var age float64
	if s.Boundary.Head > s.Checkpoint && !s.OldestUnpublished.IsZero() {
		age = max(0, time.Since(s.OldestUnpublished).Seconds())
	}
	bst.Head, bst.Published, bst.LagEvents, bst.LagSeconds = s.Boundary.Head, s.Checkpoint, s.Boundary.Head-s.Checkpoint, age
	bst.LeaseHolder, bst.LeaseTerm, bst.LeaseExpires = s.Lease.Holder, s.Lease.Term, s.Lease.Expires
}

// measureStaged reads every boundary's staged and set-aside events
// (orisun_enqueue) in one statement, when the store has them.
func (n *Node) measureStaged(ctx context.Context) (map[string]postgres.StagedState, error) {
	sm, ok := n.rawStore.(stagedMover)
	if !ok {
		return nil, nil
	}
	all, err := sm.StagedStates(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]postgres.StagedState, len(all))
	for _, s := range all {
		out[s.Boundary] = s
	}
	return out, nil
}

// fromStaged fills the staging figures.
func fromStaged(bst *BoundaryStatus, s postgres.StagedState) {
	bst.Staged, bst.SetAside, bst.SetAsideReason = uint64(s.Staged), uint64(s.SetAside), s.Reason
	if !s.Oldest.IsZero() {
		bst.StagedSeconds = max(0, time.Since(s.Oldest).Seconds())
	}
}

// listStreams reads the info of every orisun stream in one paged listing,
// by boundary; nil when the listing fails.
func listStreams(ctx context.Context, js jetstream.JetStream) map[string]*jetstream.StreamInfo {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	infos := make(map[string]*jetstream.StreamInfo)
	l := js.ListStreams(lctx, jetstream.WithStreamListSubject(stream.SubjectPrefix+".>"))
	for info := range l.Info() {
		if b, ok := strings.CutPrefix(info.Config.Name, stream.Name("")); ok {
			infos[b] = info
		}
	}
	if l.Err() != nil {
		return nil
	}
	return infos
}

// streamOf fills the boundary's stream figures from the listing, or, when
// the listing failed (infos nil) or did not list the stream, from its own
// request. A listing that succeeded may still skip a stream: it pages by
// offset in name order, so a stream deleted before the next page moves
// the next page's first stream into the page already read. Only a stream
// that its own request does not find is missing (I7: measured, never
// assumed).
func streamOf(infos map[string]*jetstream.StreamInfo, unlisted map[string]streamRead, bst *BoundaryStatus) (*jetstream.StreamInfo, error) {
	info := infos[bst.Name]
	if info == nil {
		r := unlisted[bst.Name]
		return r.info, r.err
	}
	fillStream(bst, info)
	return info, nil
}

// streamRead is a stream read on its own: its info (nil: it does not
// exist) or why it was not read.
type streamRead struct {
	info *jetstream.StreamInfo
	err  error
}

// unlistedReaders bounds the streams read on their own at once: when
// every stream is gone (a memory-storage NATS restarted) each of 1,000
// boundaries needs a request, and one after the other they took 0.4 s
// in process (a review's measurement, race build); from an external NATS
// each adds a network round trip.
const unlistedReaders = 16

// readUnlisted reads on its own, unlistedReaders at a time, every
// boundary's stream the listing did not name (all of them when it
// failed), filling each boundary's stream figures.
func readUnlisted(ctx context.Context, js jetstream.JetStream, infos map[string]*jetstream.StreamInfo, all []BoundaryStatus) map[string]streamRead {
	var mu sync.Mutex
	out := map[string]streamRead{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, unlistedReaders)
	for i := range all {
		bst := &all[i]
		if infos[bst.Name] != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			info, err := measureStream(ctx, js, bst)
			mu.Lock()
			out[bst.Name] = streamRead{info, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// measureStream reads the boundary's stream state from JetStream and
// returns its info. A missing stream is a measurement: zero figures, no
// info.
func measureStream(ctx context.Context, js jetstream.JetStream, bst *BoundaryStatus) (*jetstream.StreamInfo, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(sctx, stream.Name(bst.Name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	fillStream(bst, info)
	return info, nil
}

// fillStream copies a stream's figures into the boundary's status.
func fillStream(bst *BoundaryStatus, info *jetstream.StreamInfo) {
	bst.StreamFirst, bst.StreamLast = info.State.FirstSeq, info.State.LastSeq
	bst.StreamMsgs, bst.StreamBytes = info.State.Msgs, info.State.Bytes
	bst.StreamReplicas = max(info.Config.Replicas, 1)
}

// streamDrift compares the boundary's stream, measured in this request,
// with the store and with orisun's configuration (I7: measured, never
// assumed), and says what differs. unsettled is true when the stream holds
// what the store does not: a sequence beyond the head, or another epoch.
//
// The head was read before the stream, so a stream beyond it may only
// have published an append that committed in between: the head is read
// again, after the stream, and only a stream beyond that one holds a
// sequence the store does not (the head never goes back, unless the store
// was restored). Either way a report whose stream_last is beyond its head
// is not settled.
func (n *Node) streamDrift(ctx context.Context, store backend.Store, bst *BoundaryStatus, info *jetstream.StreamInfo) (drift []string, unsettled bool) {
	name := stream.Name(bst.Name)
	if ep := stream.Epoch(&info.Config); ep != bst.Epoch {
		drift = append(drift, fmt.Sprintf("stream %s carries epoch %q, not the boundary's %s: not settled until the leading publisher "+
			"recreates it", name, ep, bst.Epoch))
		unsettled = true
	} else if last := info.State.LastSeq; last > bst.Head {
		// Not settled either way: beyond the head read again the stream
		// holds what the store does not; within it, an append committed
		// after the first read, which this report's checkpoint does not
		// cover.
		unsettled = true
		cur, err := store.Boundary(ctx, bst.Name)
		switch {
		case err != nil:
			drift = append(drift, fmt.Sprintf("stream %s holds sequence %d, beyond the store's head %d read before it, and the head "+
				"could not be read again (%v): not settled", name, last, bst.Head, err))
		case cur.Epoch == bst.Epoch && last > cur.Head:
			drift = append(drift, fmt.Sprintf("stream %s holds sequence %d beyond the store's head %d: a message orisun did not "+
				"publish (a foreign writer), or a store that went back in time; not settled until the stream holds the "+
				"store's events only (see the leading publisher's reason)", name, last, cur.Head))
		}
	}
	want := stream.Config(bst.Name, bst.Epoch, n.streamLimits(), 0)
	if d := publisher.DescribeDrift(name, publisher.ConfigDrift(&info.Config, &want)); d != "" {
		drift = append(drift, d+"; the leading publisher puts it back (or recreates the stream from the checkpoint) "+
			"within ORISUN_POLL_INTERVAL")
	}
	if have := max(info.Config.Replicas, 1); have != want.Replicas {
		drift = append(drift, fmt.Sprintf("stream %s keeps %d replica(s), not the %d of ORISUN_NATS_STREAM_REPLICAS; the "+
			"leading publisher changes it within ORISUN_POLL_INTERVAL", name, have, want.Replicas))
	}
	return drift, unsettled
}

// joinWarnings is a boundary's warning: what the status measured, then the
// publisher's own, which says the same thing better when it names the same
// drift (JetStream refused to put it back).
func joinWarnings(measured []string, own string) string {
	var out []string
	for _, m := range measured {
		if own != "" && strings.Contains(own, strings.SplitN(m, "; ", 2)[0]) {
			continue
		}
		out = append(out, m)
	}
	if own != "" {
		out = append(out, own)
	}
	return strings.Join(out, "; ")
}

// localStatus fills in what this node's own parts know of the boundary: its
// publisher's state and its subscriptions.
func (n *Node) localStatus(bst *BoundaryStatus) {
	r := n.runner(bst.Name)
	if r == nil {
		bst.State, bst.Reason = status.StateStandby, "no publisher on this node"
		return
	}
	ps := r.pub.Status()
	bst.State, bst.Reason, bst.Since, bst.Warning = ps.State, ps.Reason, ps.Since, ps.Warning
	// The publisher's "caught up" is what it saw when it last looked: a
	// commit it was not told of yet (its notification lost or still on the
	// way, a writer outside orisun) shows as a head beyond that in this
	// report, which then says so instead of "every committed event is
	// published" (I7: measured, never assumed).
	if cu, idle := r.pub.CaughtUp(); idle && ps.State == status.StateLeading && bst.Error == "" && bst.Head > cu {
		bst.Reason = fmt.Sprintf("caught up to position %d when it last looked; the head is %d now: the publisher reads the "+
			"rest when a commit wakes it, or within ORISUN_POLL_INTERVAL", cu, bst.Head)
	}
	bst.SubsCatchingUp, bst.SubsLive, bst.SubsFallBacks = r.catchingUp.Load(), r.live.Load(), r.fallBacks.Load()
	bst.MoveError = r.move.moveError()
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

// natsKind names the NATS mode for the status: embedded, embedded-cluster
// or external.
func (n *Node) natsKind() string {
	switch {
	case n.cfg.NATSURL != "":
		return "external"
	case n.cfg.NATSClusterName != "":
		return "embedded-cluster"
	default:
		return "embedded"
	}
}
