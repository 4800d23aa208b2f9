// The sync: how a run compares the boundary's stream with the store
// (docs/design.md §5 step 1) before it publishes, creating, purging or
// recreating the stream, verifying what it holds after the checkpoint,
// fencing every destructive operation with a lease renewal, and keeping
// the stream's configuration orisun's (drift.go) and its replicas as
// configured.

package publisher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/lease"
	"github.com/orisun-io/orisun/stream"
)

// jsTimeout bounds each JetStream API call of the sync (stream info,
// create, update, the verification's reads). A request to a stream whose
// Raft leader is gone is not answered until the replicas notice and elect
// another, so the call times out: the publisher then reports the stall and
// asks again, and the first request after the election succeeds.
const jsTimeout = 5 * time.Second

// infoTimeout is the wait for the stream's info in a sync; it grows by as
// much after every four unanswered requests in a row, up to jsTimeout (so
// a machine too loaded to answer within a second is still served), and
// starts again after an answer. A stream info is answered in milliseconds
// when the stream has a leader; after the leader's server died, the
// requests sent during the election (4–9 s of Raft election timeout) are
// never answered, and a short wait asks again soon after it ends.
const infoTimeout = time.Second

// sync compares the stream with the store (docs/design.md §5 step 1) and returns the
// next position to publish. It creates the stream when missing, recreates it
// when its epoch is not the boundary's, refuses to guess when the stream is
// ahead of the store, and verifies the stream's last message against the
// store before resuming after it: a message placed there by anyone but
// orisun stops the publisher with that reason instead of shifting every
// later position (I2, I4).
func (r *run) sync(ctx context.Context) (uint64, error) {
	p := r.p
	// The stream is read before the store: the head only grows, so a stream
	// beyond the head read after it really is ahead of the store.
	s, err := r.streamInfo(ctx)
	if err != nil {
		return 0, err
	}
	b, cp, err := r.readStore(ctx)
	if err != nil {
		return 0, err
	}
	want := stream.Config(p.cfg.Boundary, b.Epoch, p.cfg.Limits, cp+1)
	r.want = want
	p.want.Store(&want)
	if s == nil {
		return r.createStream(ctx, want, cp)
	}
	info := s.CachedInfo()
	if got := stream.Epoch(&info.Config); got != b.Epoch {
		return r.replaceOtherEpoch(ctx, want, got, cp)
	}
	why, err := r.applyConfig(ctx, info, want, true)
	if err != nil {
		return 0, err
	}
	last := info.State.LastSeq
	if last > b.Head {
		// Before the recreate a drift may ask for: recreating from the
		// checkpoint would erase a stream that is ahead because the store
		// went back, which must stall (I7). Foreign messages are
		// recreated there anyway, which repairs the drift too.
		return r.aheadOfStore(ctx, s, want, cp, last, b.Head)
	}
	if why != "" {
		return r.recreate(ctx, want, cp, why+": JetStream cannot change that in place")
	}
	switch {
	case last >= cp:
		return r.resume(ctx, s, info, want, cp, last)
	default:
		return r.purgeToCheckpoint(ctx, s, cp)
	}
}

// streamInfo reads the boundary's stream: nil when there is none. A stream
// that does not answer, or answers without a Raft leader, is a
// *noLeaderError.
func (r *run) streamInfo(ctx context.Context) (jetstream.Stream, error) {
	name := stream.Name(r.p.cfg.Boundary)
	wait := min(infoTimeout*time.Duration(1+r.infoUnanswered/4), jsTimeout)
	ictx, cancel := context.WithTimeout(ctx, wait)
	s, err := r.p.cfg.JS.Stream(ictx, name)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		r.infoUnanswered++
		return nil, &noLeaderError{fmt.Errorf("stream %s: no answer within %s (JetStream answers once the stream's Raft group "+
			"has a leader; asking again): %w", name, wait, err)}
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	r.infoUnanswered = 0
	if err != nil { // not found
		return nil, nil
	}
	if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader == "" {
		// Answered by a replica while the stream's Raft group elects
		// a leader (its leader's server is gone): its state may lag
		// the acknowledged messages, and nothing can be written until
		// a leader exists. Acting on it could purge or recreate a
		// stream that is whole.
		return nil, &noLeaderError{fmt.Errorf("stream %s has no Raft leader (an election is under way, or too few of its "+
			"replicas' servers run): waiting for one", name)}
	}
	return s, nil
}

// readStore reads the boundary (its epoch and head) and the checkpoint, and
// starts the run's positions afresh when the epoch changed.
func (r *run) readStore(ctx context.Context) (event.Boundary, uint64, error) {
	p := r.p
	b, err := p.cfg.Store.Boundary(ctx, p.cfg.Boundary)
	if err != nil {
		return event.Boundary{}, 0, fmt.Errorf("read boundary: %w", err)
	}
	cp, err := p.cfg.Store.Checkpoint(ctx, p.cfg.Boundary)
	if err != nil {
		return event.Boundary{}, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if b.Epoch != r.epoch {
		r.acked, r.saved, r.known, r.synced = 0, 0, 0, false
	}
	r.epoch = b.Epoch
	r.saved = max(r.saved, cp)
	return b, cp, nil
}

// createStream creates the missing stream with its next sequence at
// checkpoint+1.
//
// Fenced like a recreate: a deposed publisher must not create, under a
// leader that just deleted the stream, one whose first sequence is its own
// older checkpoint's.
func (r *run) createStream(ctx context.Context, want jetstream.StreamConfig, cp uint64) (uint64, error) {
	fctx, cancel, err := r.fence(ctx, "create stream "+want.Name)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if _, err := r.p.cfg.JS.CreateStream(fctx, want); err != nil {
		return 0, fmt.Errorf("create stream %s: %w", want.Name, err)
	}
	r.p.log.Info("stream created", "stream", want.Name, "first_seq", cp+1, "epoch", r.epoch)
	return cp + 1, nil
}

// replaceOtherEpoch deletes a stream of another epoch (got) than the
// boundary's and creates it again from the checkpoint, fenced.
func (r *run) replaceOtherEpoch(ctx context.Context, want jetstream.StreamConfig, got string, cp uint64) (uint64, error) {
	p, name := r.p, want.Name
	p.log.Warn("stream epoch differs from the boundary's: recreating the stream",
		"stream", name, "stream_epoch", got, "epoch", r.epoch)
	fctx, cancel, err := r.fence(ctx, "delete stream "+name)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := p.cfg.JS.DeleteStream(fctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("delete stream %s of epoch %q: %w", name, got, err)
	}
	if _, err := p.cfg.JS.CreateStream(fctx, want); err != nil {
		return 0, fmt.Errorf("create stream %s: %w", name, err)
	}
	return cp + 1, nil
}

// aheadOfStore handles a stream whose last sequence is beyond the store's
// head. Once this run has synced, it knows what it put into the stream: up
// to mine, at most the head it read then (the head only grows), so the
// sequences beyond the head are none of orisun's (a foreign writer, with or
// without orisun's headers), and the stream starts again from the
// checkpoint. A run that has not synced yet cannot tell: orisun's own
// message there means the store went back in time (restored?), and the
// publisher stops with that reason rather than publish other events at
// positions subscribers have seen; a message that is not orisun's took the
// sequences, and the stream starts again from the checkpoint. A run that
// published beyond today's head itself (mine > head) met a store that went
// back in time under it, and stops too.
func (r *run) aheadOfStore(ctx context.Context, s jetstream.Stream, want jetstream.StreamConfig, cp, last, head uint64) (uint64, error) {
	wentBack := fmt.Errorf("stream %s holds sequence %d but the store's head is %d: the store went back in time (restored?); "+
		"not publishing until an operator resolves it (delete the stream to republish from the checkpoint)", want.Name, last, head)
	if r.synced {
		mine := max(r.known, r.acked)
		if mine > head {
			return 0, wentBack
		}
		return r.recreate(ctx, want, cp, fmt.Sprintf("sequences %d to %d are beyond the store's head %d, and this publisher, "+
			"leading since before they appeared, published up to %d only: foreign messages in the stream", head+1, last, head, mine))
	}
	if r.ownMessage(ctx, s, last) {
		return 0, wentBack
	}
	// The last message is not one of orisun's: foreign messages took
	// the sequences. The store is the truth: start the stream again.
	return r.recreate(ctx, want, cp, fmt.Sprintf("sequence %d is not an orisun event (foreign messages in the stream)", last))
}

// resume continues after the stream's last sequence once verify proved
// every message after the checkpoint to be this epoch's event at its
// position, moving the checkpoint there; a stream it cannot prove is
// recreated from the checkpoint.
func (r *run) resume(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, want jetstream.StreamConfig, cp, last uint64) (uint64, error) {
	proven, why, err := r.verify(ctx, s, info, cp, last)
	if err != nil {
		return 0, err
	}
	if !proven {
		return r.recreate(ctx, want, cp, why)
	}
	// Every message after the checkpoint is this epoch's event at its
	// position: they were acknowledged, so the checkpoint may move there,
	// and those OnPublished was not told of are found: before the
	// checkpoint write, so that the status (the checkpoint) never shows
	// more published than was counted, though a deposed leader's fenced
	// write fails only after it counted the new leader's events.
	r.found(cp, last)
	if last > r.saved {
		r.acked = max(r.acked, last)
		if err := r.checkpoint(ctx, last); err != nil {
			return 0, err
		}
	}
	return last + 1, nil
}

// purgeToCheckpoint handles a stream behind the checkpoint (purged or
// lost): its next sequence becomes checkpoint+1, so that sequence and
// position agree.
func (r *run) purgeToCheckpoint(ctx context.Context, s jetstream.Stream, cp uint64) (uint64, error) {
	name := stream.Name(r.p.cfg.Boundary)
	fctx, cancel, err := r.fence(ctx, "purge stream "+name)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := s.Purge(fctx, jetstream.WithPurgeSequence(cp+1)); err != nil {
		return 0, fmt.Errorf("purge stream %s to sequence %d: %w", name, cp+1, err)
	}
	r.p.log.Info("stream purged to the checkpoint", "stream", name, "next", cp+1)
	return cp + 1, nil
}

// recreate deletes the stream and creates it again with its next sequence at
// checkpoint+1, so publishing resumes from what the store says was
// acknowledged. Subscribers meet the change as a gap or a restart and read
// the store; nothing is skipped.
func (r *run) recreate(ctx context.Context, want jetstream.StreamConfig, cp uint64, why string) (uint64, error) {
	name := want.Name
	r.p.log.Warn("stream cannot be trusted after the checkpoint: recreating it from the checkpoint",
		"stream", name, "checkpoint", cp, "why", why)
	fctx, cancel, err := r.fence(ctx, "recreate stream "+name)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := r.p.cfg.JS.DeleteStream(fctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("delete stream %s (%s): %w", name, why, err)
	}
	if _, err := r.p.cfg.JS.CreateStream(fctx, want); err != nil {
		return 0, fmt.Errorf("create stream %s: %w", name, err)
	}
	return cp + 1, nil
}

// fence renews this run's lease (in the store's time, fenced by holder and
// term) just before an operation that destroys stream content (delete,
// purge, recreate), and refuses the operation unless the renewal succeeded.
// Publishes need no fence (the expected last sequence refuses a stale
// publisher, I2, I6), but a delete or purge does not check a sequence: with
// a NATS shared by several nodes, a deposed publisher acting on what it read
// before it lost the lease could erase a stream the new leader is already
// publishing to. A renewal, unlike a read, also refuses a lease that has
// expired without anyone taking it yet (another node may be taking it right
// now) and gives the operation a whole TTL: it runs under a context that
// ends when the renewed lease would expire in this process's clock (which
// starts before the renewal, so it never trusts the lease longer than the
// store does). What remains is a request already sent when that deadline
// passes and executed by the server after another node took the lease.
// Even then nothing is lost: positions live in the store, and the new
// leader re-syncs (§5 step 1) from its checkpoint; subscribers meet a gap
// and read the store (I5).
//
// The section is marked for the lease runner (lease.EnterFence): a node
// stepping down does not release the lease while it is in flight, and the
// operation runs to its answer or its deadline even when ctx ends (a step-
// down or a stop): a request abandoned on the client side may still be
// executed by the server, after the lease was released. The returned
// cancel ends the section; call it when the operation returned.
func (r *run) fence(ctx context.Context, what string) (context.Context, context.CancelFunc, error) {
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
	end, err := lease.EnterFence(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not done: %w", what, err)
	}
	start := time.Now()
	held := *r.lease.Load()
	l, err := r.p.cfg.Store.RenewLease(ctx, held, r.p.cfg.LeaseTTL)
	if errors.Is(err, event.ErrLeaseLost) {
		end()
		return nil, nil, fmt.Errorf("%s: not done, lease term %d of %q could not be renewed (expired, or a newer term exists): %w",
			what, held.Term, held.Holder, err)
	}
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("%s: not done, the lease could not be renewed first: %w", what, err)
	}
	r.lease.Store(&l)
	fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(r.p.cfg.LeaseTTL))
	return fctx, func() { cancel(); end() }, nil
}

// ownMessage reports whether the stream's message at seq carries orisun's
// headers for that position in this epoch and a body that is that event.
// A message it cannot read counts as orisun's: the safer, louder stall.
func (r *run) ownMessage(ctx context.Context, s jetstream.Stream, seq uint64) bool {
	gctx, cancel := context.WithTimeout(ctx, jsTimeout)
	m, err := s.GetMsg(gctx, seq)
	cancel()
	if err != nil {
		return true
	}
	if m.Header.Get(stream.HeaderPosition) != strconv.FormatUint(seq, 10) || m.Header.Get(stream.HeaderEpoch) != r.epoch {
		return false
	}
	e, err := stream.Decode(m.Subject, m.Header, m.Data)
	return err == nil && e.Boundary == r.p.cfg.Boundary && e.ID == m.Header.Get(stream.HeaderEventID)
}

// verify proves that the stream holds, at every sequence from cp+1 to last,
// this epoch's event at that position with the store's event id. Anything
// else publishing into the stream takes a sequence, and a pipelined message
// after it may then be accepted in place, so the last message alone proves
// nothing. Normally the range is at most one batch (the checkpoint follows
// every batch). A range that is not whole (messages gone by age or size, a
// deleted message) or holds a message that is not orisun's is not proven:
// the caller then recreates the stream from the checkpoint rather than trust
// it. A read that fails or delivers nothing (the stream's Raft group is
// electing a leader, a server is gone) proves nothing either way: it is an
// error, and the caller retries instead of destroying the stream.
//
// Every call is bounded by jsTimeout and ctx. A consumer create sent while
// the stream elects a leader may never be answered (seen: no answer within
// 30 s, the old bound here). It reads through a plain pull consumer, not an
// ordered one: an ordered consumer's Fetch re-creates its server-side
// consumer first, retrying without end (10 s a try, under no context of
// ours); one begun during an election was seen still blocked minutes later,
// a new lease holder silent all along.
func (r *run) verify(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo, cp, last uint64) (proven bool, why string, err error) {
	if last <= cp {
		return true, "", nil
	}
	if info.State.Msgs == 0 || info.State.FirstSeq > cp+1 {
		return false, fmt.Sprintf("sequences from %d on after the checkpoint have left the stream and cannot be checked", cp+1), nil
	}
	p := r.p
	name := stream.Name(p.cfg.Boundary)
	cctx, cancel := context.WithTimeout(ctx, jsTimeout)
	cons, err := s.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       cp + 1,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	cancel()
	var refused *jetstream.APIError
	if errors.As(err, &refused) {
		// JetStream answered and refused the reader: the stream's
		// consumers are at their limit (applications may take every
		// slot), or the server cannot hold another. orisun's relay never
		// depends on a consumer slot: read each message instead.
		p.log.Warn("stream verification reads message by message: JetStream refused a consumer", "stream", name, "err", err)
		return r.verifyByGet(ctx, s, cp, last)
	}
	if err != nil {
		return false, "", fmt.Errorf("verify stream %s after %d: create a reader: %w", name, cp, err)
	}
	defer func() {
		// Best effort, and not waited for by the run (a stream without a
		// leader does not answer): the server removes it after a minute
		// unused anyway. A Stop of the publisher waits for it at most
		// jsTimeout, so that a restarting node leaves no reader behind.
		name := cons.CachedInfo().Name
		p.life.Go(func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), jsTimeout)
			defer cancel()
			_ = s.DeleteConsumer(dctx, name)
		})
	}()
	want := cp + 1
	for want <= last {
		page, err := r.storePage(ctx, want, last)
		if err != nil {
			return false, "", err
		}
		batch, err := cons.Fetch(len(page), jetstream.FetchMaxWait(jsTimeout))
		if err != nil {
			return false, "", fmt.Errorf("verify stream %s after %d: %w", name, want-1, err)
		}
		i := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return false, "", fmt.Errorf("verify stream %s: %w", name, err)
			}
			seq := md.Sequence.Stream
			if seq != want || i >= len(page) || page[i].Position != seq {
				return false, fmt.Sprintf("sequence %d is missing from the stream (the next message is at %d)", want, seq), nil
			}
			if why := r.notOurs(seq, msg.Subject(), msg.Headers(), page[i].ID); why != "" {
				return false, why, nil
			}
			want++
			i++
		}
		if err := batch.Error(); err != nil {
			return false, "", fmt.Errorf("verify stream %s after %d: %w", name, want-1, err)
		}
		if i == 0 {
			return false, "", fmt.Errorf("verify stream %s: sequence %d was not delivered within %s (the stream holds it up to %d)",
				name, want, jsTimeout, last)
		}
	}
	return true, "", nil
}

// storePage reads the store's events from position want on, at most up to
// last and 1000, for a verification.
func (r *run) storePage(ctx context.Context, want, last uint64) ([]event.Event, error) {
	rctx, cancel := context.WithTimeout(ctx, jsTimeout)
	defer cancel()
	epoch, page, err := r.p.cfg.Store.Read(rctx, r.p.cfg.Boundary, want-1, min(1000, int(last-want+1)), nil)
	if err != nil {
		return nil, fmt.Errorf("read position %d: %w", want, err)
	}
	if epoch != r.epoch || len(page) == 0 {
		return nil, fmt.Errorf("read position %d: the boundary changed under the verification", want)
	}
	return page, nil
}

// notOurs says why the message at seq (its subject and headers) is not
// this epoch's event id at that position, or "" when it is.
func (r *run) notOurs(seq uint64, subject string, h nats.Header, id string) string {
	if h.Get(stream.HeaderPosition) == strconv.FormatUint(seq, 10) && h.Get(stream.HeaderEpoch) == r.epoch &&
		h.Get(stream.HeaderEventID) == id {
		return ""
	}
	return fmt.Sprintf("sequence %d on subject %s is not orisun's event at that position "+
		"(position header %q, event %q): something else publishes to orisun.events.%s.>",
		seq, subject, h.Get(stream.HeaderPosition), h.Get(stream.HeaderEventID), r.p.cfg.Boundary)
}

// verifyByGet is verify without a consumer: one message get per sequence
// (the range is normally one batch), each compared with the store's event
// at that position. A sequence the stream no longer holds, or a message
// that is not orisun's event there, is not proven; a failed request is an
// error.
func (r *run) verifyByGet(ctx context.Context, s jetstream.Stream, cp, last uint64) (proven bool, why string, err error) {
	p := r.p
	for want := cp + 1; want <= last; {
		page, err := r.storePage(ctx, want, last)
		if err != nil {
			return false, "", err
		}
		for i := range page {
			if page[i].Position != want {
				return false, "", fmt.Errorf("read position %d: the store returned position %d", want, page[i].Position)
			}
			gctx, cancel := context.WithTimeout(ctx, jsTimeout)
			m, err := s.GetMsg(gctx, want)
			cancel()
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return false, fmt.Sprintf("sequence %d is missing from the stream", want), nil
			}
			if err != nil {
				return false, "", fmt.Errorf("verify stream %s: get sequence %d: %w", stream.Name(p.cfg.Boundary), want, err)
			}
			if why := r.notOurs(want, m.Subject, m.Header, page[i].ID); why != "" {
				return false, why, nil
			}
			want++
		}
	}
	return true, "", nil
}

// applyConfig puts an existing stream's configuration back where it is
// not orisun's (ConfigDrift: subjects, limits, storage, metadata, …), and
// brings its replica count to the configured one. Nothing here stops the
// run: a setting JetStream refuses to put back (a subject another stream
// took, limits the server cannot reserve) is logged once and kept in the
// status as the publisher's warning, and put back at the next check (every
// CheckInterval) or sync. It returns the drift, described, when JetStream
// cannot undo it in place (storage, deny_delete, …): the caller recreates
// the stream from the checkpoint. The put-back goes through the fence, as
// a delete does; an error is the fence's (the lease could not be renewed).
//
// The consumer limits are put back on their own (putBackConsumerLimits),
// after the rest.
//
// A refused replica count is different: it is a configuration change that
// may pass (a cluster still forming, a peer down), tried again at
// configRetry, waiting longer each time (up to a minute); force (the sync)
// tries it at once.
func (r *run) applyConfig(ctx context.Context, info *jetstream.StreamInfo, want jetstream.StreamConfig, force bool) (recreate string, err error) {
	p := r.p
	name := want.Name
	have := info.Config
	r.want = want
	drift := ConfigDrift(&have, &want)
	if mustRecreate(drift) {
		return DescribeDrift(name, drift), nil
	}
	drift, limits := splitConsumerLimits(drift)
	what := DescribeDrift(name, drift)
	var warnings []string
	r.putBackRefused = false
	switch held := r.putBackHeld(force); {
	case len(drift) == 0:
	case held != "":
		r.putBackRefused = true
		warnings = append(warnings, what+"; "+held)
	default:
		// Fenced like a delete (I6): a publisher that no longer leads,
		// its configuration perhaps older than the leader's, must not
		// change the stream under the leader.
		fctx, cancel, err := r.fence(ctx, "put back the configuration of stream "+name)
		if err != nil {
			return "", err
		}
		si, err := p.cfg.JS.UpdateStream(fctx, Restored(&have, &want))
		cancel()
		if err != nil {
			r.putBackRefused = true
			r.putBackHold.hold("JetStream refused to put it back: " + err.Error())
			w := what + "; " + r.putBackHeld(false)
			if force {
				// A sync puts it back whatever the wait; one runs every
				// poll interval while the drift stalls the publisher.
				w += ", or at the next sync (every poll interval while the publisher is stalled)"
			}
			warnings = append(warnings, w)
			break
		}
		have = si.CachedInfo().Config
		if n := r.notePutBack(); n >= putBackBurst {
			r.putBackHold.hold(fmt.Sprintf("put back %d times within %s: something keeps changing it (a NATS controller "+
				"that owns the stream, or an operator's script?)", n, putBackWindow))
			w := what + "; " + r.putBackHeld(false)
			warnings = append(warnings, w)
			p.log.Warn("stream configuration was not orisun's: put back, and it keeps drifting", "stream", name, "drift", w)
		} else {
			p.log.Warn("stream configuration was not orisun's: put back", "stream", name, "drift", what)
		}
	}
	if limits != nil {
		var w string
		if have, w, err = r.putBackConsumerLimits(ctx, have, want, *limits); err != nil {
			return "", err
		}
		if w != "" {
			warnings = append(warnings, w)
		}
	}
	// Replicas of an existing stream can change (JetStream adds or removes
	// peers and copies the messages); without this, a changed
	// ORISUN_NATS_STREAM_REPLICAS would apply only to streams created
	// afterwards.
	// Due at a sync, at a check that finds it changed (no refusal
	// waits: someone else changed the count), or when a refusal's wait is
	// over.
	switch due := force || r.configRetry.IsZero() || !time.Now().Before(r.configRetry); {
	case max(have.Replicas, 1) == want.Replicas:
		r.replicasWarning = ""
		r.scheduleConfigRetry(false)
	case !due:
		// Refused before: the warning stands until the retry.
	default:
		upd := have
		upd.Replicas = want.Replicas
		// Fenced like a put-back: a deposed publisher's configuration may
		// be older than the leader's.
		fctx, cancel, err := r.fence(ctx, "change the replicas of stream "+name)
		if err != nil {
			return "", err
		}
		uctx, cancelUpdate := context.WithTimeout(fctx, jsTimeout)
		si, err := p.cfg.JS.UpdateStream(uctx, upd)
		cancelUpdate()
		cancel()
		if err != nil {
			hint := ""
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				hint = " (a stream needs as many JetStream servers in the cluster as replicas; a single server takes 1 only)"
			}
			r.replicasWarning = fmt.Sprintf("stream %s keeps %d replica(s), not the %d of ORISUN_NATS_STREAM_REPLICAS: "+
				"JetStream refused the change: %v%s; trying again", name, max(have.Replicas, 1), want.Replicas, err, hint)
			r.scheduleConfigRetry(true)
		} else {
			r.replicasWarning = ""
			r.scheduleConfigRetry(false)
			p.log.Info("stream replicas changed", "stream", name, "from", max(have.Replicas, 1), "to", si.CachedInfo().Config.Replicas)
		}
	}
	if r.replicasWarning != "" {
		warnings = append(warnings, r.replicasWarning)
	}
	w := strings.Join(warnings, "; ")
	if p.setWarning(w) && w != "" {
		p.log.Warn("stream configuration not applied", "stream", name, "warning", w)
	}
	return "", nil
}

// putBackConsumerLimits puts the stream's consumer limits
// (stream.ConsumerInactiveMax) back on their own, returning the stream's
// configuration after it and a warning when they are not put back.
// JetStream refuses them while a consumer of the stream asks to be kept
// unused longer ("change to limits violates consumers: <names>"), which
// does not stop the publisher, nor the rest of the configuration from
// being put back. A stream without them was created by an earlier orisun:
// setting them is the upgrade, logged at info level; other limits are
// someone's change, warned about as any drift. A refusal waits before the
// next try, longer each time (up to putBackMaxWait), and so does a
// put-back after another within the run (something keeps changing them).
// Fenced like any put-back.
func (r *run) putBackConsumerLimits(ctx context.Context, have, want jetstream.StreamConfig, d Drift) (jetstream.StreamConfig, string, error) {
	p := r.p
	name := want.Name
	what := DescribeDrift(name, []Drift{d})
	if held := r.limitsHold.held(); held != "" {
		return have, what + "; " + held, nil
	}
	fctx, cancel, err := r.fence(ctx, "put back the consumer limits of stream "+name)
	if err != nil {
		return have, "", err
	}
	upd := have
	upd.ConsumerLimits = want.ConsumerLimits
	uctx, cancelUpdate := context.WithTimeout(fctx, jsTimeout)
	si, err := p.cfg.JS.UpdateStream(uctx, upd)
	cancelUpdate()
	cancel()
	if err != nil {
		why := "JetStream refused to set them: " + err.Error()
		if strings.Contains(err.Error(), "violates consumers") {
			why += fmt.Sprintf(" (those consumers ask to be kept unused longer than %s; the limits are set once they are gone "+
				"or ask for less, and consumers created meanwhile are not held to them)", want.ConsumerLimits.InactiveThreshold)
		}
		r.limitsHold.hold(why)
		return have, what + "; " + r.limitsHold.held(), nil
	}
	r.limitsHold.hold("put back once in this run, and changed again (something keeps changing them?)")
	if have.ConsumerLimits == (jetstream.StreamConsumerLimits{}) {
		p.log.Info("stream consumer limits set: the stream was created without them (by an earlier orisun)",
			"stream", name, "inactive_threshold", want.ConsumerLimits.InactiveThreshold)
	} else {
		p.log.Warn("stream configuration was not orisun's: put back", "stream", name, "drift", what)
	}
	return si.CachedInfo().Config, "", nil
}

// putBackHold is when a put-back may run next, and why it waits: the
// drifted settings' (run.putBackHeld) and, apart, the consumer limits'
// (putBackConsumerLimits).
type putBackHold struct {
	at   time.Time
	wait time.Duration
	why  string
}

// held says why and for how long the next put-back waits, or "" when it
// may run now.
func (h *putBackHold) held() string {
	if !time.Now().Before(h.at) {
		return ""
	}
	// Whole seconds, rounded up: "in 0s" would read as "now".
	in := (time.Until(h.at) + time.Second - 1).Truncate(time.Second)
	return fmt.Sprintf("%s; the next put-back is in %s", h.why, in)
}

// hold makes the next put-back wait longer than the last.
func (h *putBackHold) hold(why string) {
	h.wait = min(max(2*h.wait, time.Second), putBackMaxWait)
	h.at = time.Now().Add(h.wait)
	h.why = why
}

// scheduleConfigRetry sets when a refused replica count is tried again:
// never while the stream has the configured one, with a growing wait while
// it does not.
func (r *run) scheduleConfigRetry(pending bool) {
	if !pending {
		r.configRetry, r.configWait = time.Time{}, 0
		return
	}
	r.configWait = min(max(2*r.configWait, time.Second), time.Minute)
	r.configRetry = time.Now().Add(r.configWait)
}

// A drifted setting is put back at the next check, but not without end:
// one JetStream refuses, or one that something keeps changing back (put
// back putBackBurst times within putBackWindow), waits before the next
// try, twice as long each time up to putBackMaxWait. Each try renews the
// lease (a store write) and a fight with a controller that owns the stream
// is won by neither; the status names the drift and the wait meanwhile.
const (
	putBackBurst   = 3
	putBackWindow  = time.Minute
	putBackMaxWait = 5 * time.Minute
)

// putBackHeld says why and until when the next put-back waits, or "" when
// it may run now. A sync (force) always may: it runs because a publish
// failed or the stream is not as the run left it, and the publisher cannot
// go on with the drift.
func (r *run) putBackHeld(force bool) string {
	if force {
		return ""
	}
	return r.putBackHold.held()
}

// notePutBack records a put-back that JetStream took and returns how many
// this run made within putBackWindow. The first of a window starts the
// waits over.
func (r *run) notePutBack() int {
	now := time.Now()
	r.putBacks = slices.DeleteFunc(append(r.putBacks, now), func(t time.Time) bool { return now.Sub(t) > putBackWindow })
	if len(r.putBacks) == 1 {
		r.putBackHold.wait = 0
	}
	return len(r.putBacks)
}

// noLeaderError says that the stream has no Raft leader now (the server
// that led it is gone and the others elect one): the sync is retried every
// noLeaderRetry.
type noLeaderError struct{ err error }

func (e *noLeaderError) Error() string { return e.err.Error() }
func (e *noLeaderError) Unwrap() error { return e.err }

const noLeaderRetry = 200 * time.Millisecond

// published tells OnPublished of the events first to last, acknowledged
// took after the first was sent (as one fast-ingest batch when fast), and
// remembers the last across runs for found.
func (r *run) published(first, last uint64, took time.Duration, fast bool) {
	r.p.tell(r.epoch, last)
	if r.p.cfg.OnPublished != nil {
		r.p.cfg.OnPublished(int(last-first+1), last, took, fast)
	}
}

// found tells OnFound of the stream's messages after the checkpoint cp up
// to last that this publisher was not told of in this epoch: a run that
// ended with batches in flight (their acknowledgements never awaited)
// published them, or another node did before a takeover. Without it the
// published count stays below the stream for good.
func (r *run) found(cp, last uint64) {
	from := max(cp, r.p.tell(r.epoch, last))
	if last > from && r.p.cfg.OnFound != nil {
		r.p.cfg.OnFound(int(last-from), last)
	}
}

// tell records that position last of epoch was told of and returns the
// last position of epoch told of before (0 in a new epoch).
func (p *Publisher) tell(epoch string, last uint64) (before uint64) {
	p.toldMu.Lock()
	defer p.toldMu.Unlock()
	if p.toldEpoch != epoch {
		p.toldEpoch, p.told = epoch, 0
	}
	before = p.told
	p.told = max(p.told, last)
	return before
}
