package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/lease"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// Store is what the publisher needs from the store.
type Store interface {
	backend.Reader
	Boundary(ctx context.Context, name string) (event.Boundary, error)
	Checkpoint(ctx context.Context, boundary string) (uint64, error)
	SaveCheckpoint(ctx context.Context, boundary string, lease backend.Lease, position uint64) error
	// RenewLease extends this run's lease just before the stream is
	// deleted, purged or recreated (see fence).
	RenewLease(ctx context.Context, l backend.Lease, ttl time.Duration) (backend.Lease, error)
}

// HeadProber is implemented by stores where an append transaction can hold
// a boundary's head row open (PostgreSQL): it lets the status say that the
// publisher waits for an uncommitted append instead of calling it idle.
type HeadProber interface {
	HeadLocked(ctx context.Context, boundary string) (bool, error)
}

// Config of one boundary's publisher.
type Config struct {
	Boundary string
	Store    Store
	// JS is the JetStream context to publish with.
	JS     jetstream.JetStream
	Limits stream.Limits
	// BatchSize is the most events read and published per batch.
	BatchSize int
	// Window is the most publishes in flight (unacknowledged) at once.
	Window int
	// PollInterval bounds the wait for a wake-up when drained: the
	// backstop that publishes what no wake-up announced (I4). A node that
	// wakes its publishers from one shared read of every head (see
	// Behind) sets it long, so that a thousand idle boundaries do not each
	// read the store every second.
	PollInterval time.Duration
	// ProbeInterval is how often, at most, an idle publisher probes its
	// boundary's head row (HeadProber), and how long the row must be seen
	// held before the status says the publisher waits for it. An idle
	// publisher that skipped a probe (one ran less than ProbeInterval ago)
	// or saw the row held wakes again when the next probe is due, however
	// long PollInterval is. Zero: PollInterval.
	ProbeInterval time.Duration
	// AckTimeout bounds the wait for one acknowledgement.
	AckTimeout time.Duration
	// LeaseTTL is what the fence renews the lease for before it deletes,
	// purges or recreates the stream (the node's ORISUN_LEASE_TTL; 10s
	// when zero).
	LeaseTTL time.Duration
	// MsgID sets Nats-Msg-Id to the event id.
	MsgID bool
	// Wake receives a value when the boundary may have new events.
	Wake   <-chan struct{}
	Logger *slog.Logger

	// AfterAck, when set, is called once a batch is fully acknowledged and
	// before its checkpoint is written. Tests use it as a fault point.
	AfterAck func(last uint64)

	// CheckpointBeforeAck breaks the publisher on purpose: each batch's
	// checkpoint is written before the batch is published, so before any
	// acknowledgement. It exists only for the fault suite's negative
	// control of C6 (cmd/orisun's faultinject build sets it from
	// ORISUN_FAULT_CHECKPOINT_BEFORE_ACK); nothing else may set it.
	CheckpointBeforeAck bool
}

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

// Publisher relays one boundary's events into its stream.
type Publisher struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	state Status

	// progress is when (Unix nanoseconds) the running publisher last made
	// progress: it started, had a batch acknowledged, or found nothing to
	// publish; 0 while it does not run. idle is true while it waits for
	// new events, caught up. See Stalled.
	progress atomic.Int64
	idle     atomic.Bool
	// caughtUp is the position the publisher had read up to, and
	// epoch the boundary's epoch, when it last became idle; both are
	// stored before idle is set (see Behind).
	caughtUp atomic.Uint64
	epoch    atomic.Pointer[string]
}

// New returns a publisher in state standby.
func New(cfg Config) *Publisher {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Window <= 0 {
		cfg.Window = 256
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = cfg.PollInterval
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger.With("boundary", cfg.Boundary)}
	p.state = Status{State: status.StateStandby, Reason: "not leading", Since: time.Now().UTC()}
	return p
}

// Run publishes while ctx lives, as the holder of lease. When ctx ends it
// finishes sending the batch it is sending, awaits everything in flight (at
// most Window messages after the last send, of that batch and the one
// before it), checkpoints it and returns, reading and sending nothing more.
// It returns nil on a clean stop, event.ErrLeaseLost when a checkpoint write
// was refused because the lease term is stale (a newer publisher exists).
func (p *Publisher) Run(ctx context.Context, lease backend.Lease) error {
	r := &run{p: p, lease: lease}
	p.idle.Store(false)
	p.markProgress()
	err := r.loop(ctx)
	p.progress.Store(0)
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, event.ErrLeaseLost) || errors.Is(cause, event.ErrLeaseLost):
		p.setState(status.StateStandby, "lease lost: another node holds a newer term", nil)
	case cause != nil && !errors.Is(cause, context.Canceled):
		// The lease ran out because the store did not answer: nobody
		// publishes this boundary now, which is a stall, not a standby.
		p.setState(status.StateStalled, cause.Error(), cause)
	default:
		p.setState(status.StateStandby, "stopped", nil)
	}
	return err
}

// run is the state of one Run.
type run struct {
	p     *Publisher
	lease backend.Lease
	epoch string
	// acked is the last position JetStream acknowledged; saved the last
	// checkpoint written.
	acked, saved uint64
	// heldSince is when the head row was first seen held by an append
	// transaction while there was nothing to publish.
	heldSince time.Time
	// want is the stream configuration of the last sync; while part of it
	// could not be applied (a warning), the update is tried again at
	// configRetry, waiting configWait longer each time (up to a minute):
	// a refusal may pass (a cluster still forming, a peer down).
	want        jetstream.StreamConfig
	configRetry time.Time
	configWait  time.Duration
	// probed is when the head row was last probed, lastReason what the
	// probe said.
	probed     time.Time
	lastReason string
	// probeSkipped is true when the last idle moment did not probe (one
	// ran less than ProbeInterval before): the next is due then.
	probeSkipped bool
	// infoUnanswered counts the stream info requests in a row that got
	// no answer (see infoTimeout).
	infoUnanswered int
}

func (r *run) loop(ctx context.Context) error {
	p := r.p
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	defer r.finalCheckpoint()
	for ctx.Err() == nil {
		next, err := r.sync(ctx)
		if errors.Is(err, event.ErrLeaseLost) {
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var nl *noLeaderError
			if errors.As(err, &nl) {
				// The stream waits for a Raft leader: ask again soon (the
				// request itself waited), without growing the backoff, so
				// publishing resumes right after the election.
				p.setState(status.StateStalled, err.Error(), err)
				if !sleep(ctx, noLeaderRetry) {
					return nil
				}
				continue
			}
			if isPaused(err) {
				p.setState(status.StatePaused, pausedReason(err), err)
			} else {
				p.setState(status.StateStalled, err.Error(), err)
			}
			if !backoff.wait(ctx) {
				return nil
			}
			continue
		}
		err = r.drain(ctx, next)
		if errors.Is(err, event.ErrLeaseLost) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			if isPaused(err) {
				p.setState(status.StatePaused, pausedReason(err), err)
			} else {
				p.setState(status.StateStalled, err.Error(), err)
			}
			if !backoff.wait(ctx) {
				return nil
			}
			continue
		}
		backoff.reset()
	}
	return nil
}

// sync compares the stream with the store (DESIGN §5 step 1) and returns the
// next position to publish. It creates the stream when missing, recreates it
// when its epoch is not the boundary's, refuses to guess when the stream is
// ahead of the store, and verifies the stream's last message against the
// store before resuming after it: a message placed there by anyone but
// orisun stops the publisher with that reason instead of shifting every
// later position (I2, I4).
func (r *run) sync(ctx context.Context) (uint64, error) {
	p := r.p
	name := stream.Name(p.cfg.Boundary)
	// The stream is read before the store: the head only grows, so a stream
	// beyond the head read after it really is ahead of the store.
	wait := min(infoTimeout*time.Duration(1+r.infoUnanswered/4), jsTimeout)
	ictx, cancel := context.WithTimeout(ctx, wait)
	s, streamErr := p.cfg.JS.Stream(ictx, name)
	cancel()
	if errors.Is(streamErr, context.DeadlineExceeded) && ctx.Err() == nil {
		r.infoUnanswered++
		return 0, &noLeaderError{fmt.Errorf("stream %s: no answer within %s (JetStream answers once the stream's Raft group "+
			"has a leader; asking again): %w", name, wait, streamErr)}
	}
	if streamErr != nil && !errors.Is(streamErr, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("stream %s: %w", name, streamErr)
	}
	r.infoUnanswered = 0
	if streamErr == nil {
		if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader == "" {
			// Answered by a replica while the stream's Raft group elects
			// a leader (its leader's server is gone): its state may lag
			// the acknowledged messages, and nothing can be written until
			// a leader exists. Acting on it could purge or recreate a
			// stream that is whole.
			return 0, &noLeaderError{fmt.Errorf("stream %s has no Raft leader (an election is under way, or too few of its "+
				"replicas' servers run): waiting for one", name)}
		}
	}
	b, err := p.cfg.Store.Boundary(ctx, p.cfg.Boundary)
	if err != nil {
		return 0, fmt.Errorf("read boundary: %w", err)
	}
	cp, err := p.cfg.Store.Checkpoint(ctx, p.cfg.Boundary)
	if err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if b.Epoch != r.epoch {
		r.acked, r.saved = 0, 0
	}
	r.epoch = b.Epoch
	r.saved = max(r.saved, cp)
	want := stream.Config(p.cfg.Boundary, b.Epoch, p.cfg.Limits, cp+1)

	if streamErr != nil { // not found
		if _, err := p.cfg.JS.CreateStream(ctx, want); err != nil {
			return 0, fmt.Errorf("create stream %s: %w", name, err)
		}
		p.log.Info("stream created", "stream", name, "first_seq", cp+1, "epoch", b.Epoch)
		return cp + 1, nil
	}
	info := s.CachedInfo()
	if got := stream.Epoch(&info.Config); got != b.Epoch {
		p.log.Warn("stream epoch differs from the boundary's: recreating the stream",
			"stream", name, "stream_epoch", got, "epoch", b.Epoch)
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
	r.applyConfig(ctx, info, want)
	last := info.State.LastSeq
	if last > b.Head {
		if r.ownMessage(ctx, s, last) {
			return 0, fmt.Errorf("stream %s holds sequence %d but the store's head is %d: the store went back in time (restored?); "+
				"not publishing until an operator resolves it (delete the stream to republish from the checkpoint)", name, last, b.Head)
		}
		// The last message is not one of orisun's: foreign messages took
		// the sequences. The store is the truth: start the stream again.
		return r.recreate(ctx, want, cp, fmt.Sprintf("sequence %d is not an orisun event (foreign messages in the stream)", last))
	}
	if last >= cp {
		proven, why, err := r.verify(ctx, s, info, cp, last)
		if err != nil {
			return 0, err
		}
		if !proven {
			return r.recreate(ctx, want, cp, why)
		}
		// Every message after the checkpoint is this epoch's event at its
		// position: they were acknowledged, so the checkpoint may move there.
		if last > r.saved {
			r.acked = max(r.acked, last)
			if err := r.checkpoint(ctx, last); err != nil {
				return 0, err
			}
		}
		return last + 1, nil
	}
	// The stream is behind the checkpoint (purged or lost): make its next
	// sequence checkpoint+1, so that sequence and position agree.
	fctx, cancel, err := r.fence(ctx, "purge stream "+name)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if err := s.Purge(fctx, jetstream.WithPurgeSequence(cp+1)); err != nil {
		return 0, fmt.Errorf("purge stream %s to sequence %d: %w", name, cp+1, err)
	}
	p.log.Info("stream purged to the checkpoint", "stream", name, "next", cp+1)
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
	l, err := r.p.cfg.Store.RenewLease(ctx, r.lease, r.p.cfg.LeaseTTL)
	if errors.Is(err, event.ErrLeaseLost) {
		end()
		return nil, nil, fmt.Errorf("%s: not done, lease term %d of %q could not be renewed (expired, or a newer term exists): %w",
			what, r.lease.Term, r.lease.Holder, err)
	}
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("%s: not done, the lease could not be renewed first: %w", what, err)
	}
	r.lease = l
	fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(r.p.cfg.LeaseTTL))
	return fctx, func() { cancel(); end() }, nil
}

// ownMessage reports whether the stream's message at seq carries orisun's
// headers for that position in this epoch.
func (r *run) ownMessage(ctx context.Context, s jetstream.Stream, seq uint64) bool {
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return true // cannot tell: keep the safer, louder stall
	}
	return m.Header.Get(stream.HeaderPosition) == strconv.FormatUint(seq, 10) && m.Header.Get(stream.HeaderEpoch) == r.epoch
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
	if err != nil {
		return false, "", fmt.Errorf("verify stream %s after %d: create a reader: %w", name, cp, err)
	}
	defer func() {
		// Best effort, and not waited for (a stream without a leader does
		// not answer): the server removes it after a minute unused anyway.
		go func(name string) {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jsTimeout)
			defer cancel()
			_ = s.DeleteConsumer(dctx, name)
		}(cons.CachedInfo().Name)
	}()
	want := cp + 1
	for want <= last {
		rctx, cancel := context.WithTimeout(ctx, jsTimeout)
		epoch, page, err := p.cfg.Store.Read(rctx, p.cfg.Boundary, want-1, min(1000, int(last-want+1)), nil)
		cancel()
		if err != nil {
			return false, "", fmt.Errorf("read position %d: %w", want, err)
		}
		if epoch != r.epoch || len(page) == 0 {
			return false, "", fmt.Errorf("read position %d: the boundary changed under the verification", want)
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
			h := msg.Headers()
			if h.Get(stream.HeaderPosition) != strconv.FormatUint(seq, 10) || h.Get(stream.HeaderEpoch) != r.epoch ||
				h.Get(stream.HeaderEventID) != page[i].ID {
				return false, fmt.Sprintf("sequence %d on subject %s is not orisun's event at that position "+
					"(position header %q, event %q): something else publishes to orisun.events.%s.>",
					seq, msg.Subject(), h.Get(stream.HeaderPosition), h.Get(stream.HeaderEventID), p.cfg.Boundary), nil
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

// applyConfig brings an existing stream's limits and replica count to the
// configured ones. A refusal is not a stall (the stream still takes the
// events): it is logged once, with JetStream's reason, and kept in the
// status as the publisher's warning until an update succeeds.
func (r *run) applyConfig(ctx context.Context, info *jetstream.StreamInfo, want jetstream.StreamConfig) {
	p := r.p
	name := want.Name
	have := info.Config
	var warnings []string
	if limitsDiffer(&have, &want) {
		upd := have
		upd.MaxBytes, upd.MaxMsgs, upd.MaxAge, upd.Duplicates = want.MaxBytes, want.MaxMsgs, want.MaxAge, want.Duplicates
		if upd.Duplicates == 0 {
			upd.Duplicates = have.Duplicates
		}
		if si, err := p.cfg.JS.UpdateStream(ctx, upd); err != nil {
			warnings = append(warnings, fmt.Sprintf("stream %s keeps its limits (max bytes %d, max msgs %d, max age %s): "+
				"JetStream refused the configured ones: %v; trying again", name, have.MaxBytes, have.MaxMsgs, have.MaxAge, err))
		} else {
			have = si.CachedInfo().Config
		}
	}
	// Replicas of an existing stream can change (JetStream adds or removes
	// peers and copies the messages); without this, a changed
	// ORISUN_NATS_STREAM_REPLICAS would apply only to streams created
	// afterwards.
	if max(have.Replicas, 1) != want.Replicas {
		upd := have
		upd.Replicas = want.Replicas
		if si, err := p.cfg.JS.UpdateStream(ctx, upd); err != nil {
			hint := ""
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				hint = " (a stream needs as many JetStream servers in the cluster as replicas; a single server takes 1 only)"
			}
			warnings = append(warnings, fmt.Sprintf("stream %s keeps %d replica(s), not the %d of ORISUN_NATS_STREAM_REPLICAS: "+
				"JetStream refused the change: %v%s; trying again", name, max(have.Replicas, 1), want.Replicas, err, hint))
		} else {
			p.log.Info("stream replicas changed", "stream", name, "from", max(have.Replicas, 1), "to", si.CachedInfo().Config.Replicas)
		}
	}
	w := strings.Join(warnings, "; ")
	if p.setWarning(w) && w != "" {
		p.log.Warn("stream configuration not applied", "stream", name, "warning", w)
	}
	r.want = want
	r.scheduleConfigRetry(w != "")
}

// scheduleConfigRetry sets when applyConfig runs again: never while the
// stream matches the configuration, with a growing wait while it does not.
func (r *run) scheduleConfigRetry(pending bool) {
	if !pending {
		r.configRetry, r.configWait = time.Time{}, 0
		return
	}
	r.configWait = min(max(2*r.configWait, time.Second), time.Minute)
	r.configRetry = time.Now().Add(r.configWait)
}

// retryConfig applies the configuration again when a retry is due (see
// run.want). It never fails the run: the stream still takes the events.
func (r *run) retryConfig(ctx context.Context) {
	if r.configRetry.IsZero() || time.Now().Before(r.configRetry) {
		return
	}
	s, err := r.p.cfg.JS.Stream(ctx, r.want.Name)
	if err != nil {
		r.scheduleConfigRetry(true)
		return
	}
	r.applyConfig(ctx, s.CachedInfo(), r.want)
}

func limitsDiffer(have, want *jetstream.StreamConfig) bool {
	return have.MaxBytes != want.MaxBytes || have.MaxMsgs != want.MaxMsgs || have.MaxAge != want.MaxAge ||
		want.Duplicates != 0 && have.Duplicates != want.Duplicates
}

// drain publishes from next on, batch after batch, and waits for new events
// when drained. It returns on the first error (the caller resyncs).
//
// The pipeline never empties between batches: while a batch's messages are
// in flight, the next batch is read from the store, and its messages follow
// in the same window (at most Window unacknowledged in all). Each batch's
// checkpoint is handed to the checkpointer as soon as its last message is
// acknowledged, which, acknowledgements arriving in order, means all of it
// (I3); it writes in the background, and drain returns only once what it
// was handed is written. Before this,
// every batch waited for its whole window to drain and then for its read,
// and the stream sat idle meanwhile (docs/performance.md).
func (r *run) drain(ctx context.Context, next uint64) error {
	p := r.p
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	// Acknowledgements are awaited even when ctx ends: a clean stop
	// finishes and checkpoints what it started.
	actx := context.WithoutCancel(ctx)
	fl := &flight{r: r, ck: r.startCheckpointer(actx)}
	var pre chan readResult
	defer func() {
		if pre != nil {
			<-pre // the prefetch ends with ctx or its read
		}
	}()
	err := r.pump(ctx, actx, fl, next, poll, &pre)
	// The checkpoints of what the pump saw acknowledged are written before
	// drain returns (a clean stop leaves the checkpoint at the last
	// acknowledged position); a checkpoint that failed (a lost lease, the
	// store down) fails the drain, unless it failed already.
	if cerr := fl.ck.stop(); cerr != nil && (err == nil || errors.Is(cerr, event.ErrLeaseLost)) {
		// A lost lease wins over the pump's own error (most likely the
		// new leader's messages refusing this one's publish): it ends the
		// run, where another error would only resync.
		err = cerr
	}
	return err
}

// pump is drain's loop.
func (r *run) pump(ctx, actx context.Context, fl *flight, next uint64, poll *time.Timer, prefetch *chan readResult) error {
	p := r.p
	pre := *prefetch
	defer func() { *prefetch = pre }()
	for ctx.Err() == nil {
		if err := fl.ck.failure(); err != nil {
			return err
		}
		r.retryConfig(ctx)
		var res readResult
		if pre != nil {
			res = <-pre
			pre = nil
		} else {
			res = r.read(ctx, next)
		}
		epoch, events, err := res.epoch, res.events, res.err
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("read events after %d: %w", next-1, err)
		}
		if epoch != r.epoch {
			return fmt.Errorf("boundary epoch changed from %s to %s: resyncing the stream", r.epoch, epoch)
		}
		if len(events) == 0 {
			// Caught up: await what is in flight (checkpointing each batch
			// once fully acknowledged), but a commit signalled meanwhile
			// is read at once, its events following the ones in flight in
			// the same window. Awaiting every acknowledgement first made
			// live publishing stop-and-wait per short batch.
			woken, err := fl.settleOrWake(actx, 0, p.cfg.Wake)
			if err != nil {
				return err
			}
			if woken {
				continue
			}
			// A commit signalled since the read: read again at once. The
			// head-row probe of the idle path is a store round trip that
			// new events would wait behind; it runs when the publisher
			// really waits.
			select {
			case <-p.cfg.Wake:
				continue
			default:
			}
			p.setState(status.StateLeading, r.idleReason(ctx), nil)
			poll.Reset(r.idleWait())
			p.markProgress()
			p.caughtUp.Store(next - 1)
			if e := p.epoch.Load(); e == nil || *e != r.epoch {
				epoch := r.epoch
				p.epoch.Store(&epoch)
			}
			p.idle.Store(true)
			select {
			case <-ctx.Done():
				p.idle.Store(false)
				return nil
			case <-p.cfg.Wake:
			case <-poll.C:
			case <-fl.ck.failed:
			}
			p.idle.Store(false)
			p.markProgress()
			continue
		}
		// After a pause or a stall the state turns back to leading only once
		// a batch is acknowledged: a retry that fails again must not flap
		// the state (and the log) between leading and paused.
		if !p.troubled() {
			p.setState(status.StateLeading, "publishing", nil)
		}
		if events[0].Position != next {
			// The store broke I1: never publish around a hole.
			return fmt.Errorf("store returned position %d after %d: a gap in the store", events[0].Position, next-1)
		}
		last := events[len(events)-1].Position
		if p.cfg.CheckpointBeforeAck {
			// The deliberately broken order of the negative control.
			if err := r.checkpoint(ctx, last); err != nil {
				return err
			}
		}
		// A full batch means more may wait in the store: read it while
		// this one is in flight. A short one reached the head; the next
		// read (after it is sent) usually finds nothing.
		if len(events) == p.cfg.BatchSize {
			pre = make(chan readResult, 1)
			go func(after uint64) { pre <- r.read(ctx, after+1) }(last)
		}
		if err := fl.send(actx, events); err != nil {
			return err
		}
		next = last + 1
	}
	// Stopping: finish the batches in flight and checkpoint them.
	return fl.settle(actx, 0)
}

// readResult is one store read.
type readResult struct {
	epoch  string
	events []event.Event
	err    error
}

func (r *run) read(ctx context.Context, next uint64) readResult {
	epoch, events, err := r.p.cfg.Store.Read(ctx, r.p.cfg.Boundary, next-1, r.p.cfg.BatchSize, nil)
	return readResult{epoch, events, err}
}

// flight is the window of published, unacknowledged messages, in position
// order, across batches.
type flight struct {
	r  *run
	ck *checkpointer
	// futures and positions of the messages in flight, oldest first.
	futures   []jetstream.PubAckFuture
	positions []uint64
	// ends are the last positions of the batches in flight, oldest first.
	ends []uint64
}

// send publishes a batch into the window, each message expecting the
// previous position as the stream's last sequence (I2), awaiting the
// oldest acknowledgement whenever Window messages are in flight.
func (fl *flight) send(ctx context.Context, events []event.Event) error {
	p := fl.r.p
	fl.ends = append(fl.ends, events[len(events)-1].Position)
	for i := range events {
		e := &events[i]
		if e.Position != events[0].Position+uint64(i) {
			return fmt.Errorf("store returned position %d at index %d of a batch from %d: a gap in the store",
				e.Position, i, events[0].Position)
		}
		if err := fl.settle(ctx, p.cfg.Window-1); err != nil {
			return err
		}
		msg, err := stream.Message(e, p.cfg.MsgID)
		if err != nil {
			return err
		}
		f, err := p.cfg.JS.PublishMsgAsync(msg, jetstream.WithExpectLastSequence(e.Position-1),
			jetstream.WithStallWait(p.cfg.AckTimeout))
		if errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("publish position %d (event %s): the message is %d bytes, more than the NATS max payload: "+
				"it was not written through orisun's append (which checks the limit); raise ORISUN_NATS_MAX_PAYLOAD or repair the row: %w",
				e.Position, e.ID, len(msg.Data)+headerSize(msg.Header), err)
		}
		if err != nil {
			return fmt.Errorf("publish position %d: %w", e.Position, err)
		}
		fl.futures = append(fl.futures, f)
		fl.positions = append(fl.positions, e.Position)
	}
	return nil
}

// settle awaits acknowledgements, oldest first, until at most keep
// messages are in flight. Each batch whose last message is acknowledged is
// checkpointed then, after the AfterAck hook.
func (fl *flight) settle(ctx context.Context, keep int) error {
	_, err := fl.settleOrWake(ctx, keep, nil)
	return err
}

// settleOrWake is settle that also returns, woken, as soon as a wake-up
// arrives on wake (nil: never) while it waits; what is still in flight
// stays there, unawaited, with its batches not yet checkpointed.
func (fl *flight) settleOrWake(ctx context.Context, keep int, wake <-chan struct{}) (woken bool, err error) {
	r := fl.r
	i := 0
	defer func() {
		// Drop what was awaited; the slices' arrays are reused.
		n := copy(fl.futures, fl.futures[i:])
		clear(fl.futures[n:])
		fl.futures = fl.futures[:n]
		fl.positions = fl.positions[:copy(fl.positions, fl.positions[i:])]
	}()
	for ; len(fl.futures)-i > keep; i++ {
		pos := fl.positions[i]
		if err := r.await(ctx, fl.futures[i], pos, wake); err != nil {
			if errors.Is(err, errWoken) {
				return true, nil // the future i is not consumed
			}
			i++
			return false, err
		}
		if len(fl.ends) == 0 || pos != fl.ends[0] {
			continue
		}
		fl.ends = fl.ends[1:]
		r.acked = pos
		r.p.markProgress()
		r.p.setState(status.StateLeading, "publishing", nil)
		if r.p.cfg.AfterAck != nil {
			r.p.cfg.AfterAck(pos)
		}
		fl.ck.save(pos)
		select {
		case <-fl.ck.failed:
			// An earlier checkpoint failed (a lost lease): stop here
			// rather than after another batch.
			i++
			return false, fl.ck.failure()
		default:
		}
	}
	return false, nil
}

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

// errWoken is await's answer when a wake-up came before the acknowledgement.
var errWoken = errors.New("woken")

// await waits for the acknowledgement of the message at pos, or for a
// wake-up on wake (nil: none), which returns errWoken and leaves f
// unconsumed.
func (r *run) await(ctx context.Context, f jetstream.PubAckFuture, pos uint64, wake <-chan struct{}) error {
	timer := time.NewTimer(r.p.cfg.AckTimeout)
	defer timer.Stop()
	select {
	case <-wake:
		return errWoken
	case ack := <-f.Ok():
		if ack.Sequence != pos {
			return fmt.Errorf("position %d acknowledged at stream sequence %d (duplicate: %v): refusing to continue out of place",
				pos, ack.Sequence, ack.Duplicate)
		}
		return nil
	case err := <-f.Err():
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return fmt.Errorf("publish position %d refused: the stream's last sequence is not %d (another publisher, or the stream changed): %w",
				pos, pos-1, err)
		}
		return fmt.Errorf("publish position %d: %w", pos, err)
	case <-timer.C:
		return fmt.Errorf("publish position %d: no acknowledgement within %s", pos, r.p.cfg.AckTimeout)
	case <-ctx.Done():
		return fmt.Errorf("publish position %d: %w", pos, ctx.Err())
	}
}

// checkpoint writes the checkpoint of an acknowledged position. A stale
// lease is final for this run; another failure is retried with the next
// batch (the write is monotonic, so a later one covers this one).
func (r *run) checkpoint(ctx context.Context, pos uint64) error {
	if err := r.saveCheckpoint(ctx, pos); err != nil {
		return err
	}
	r.saved = max(r.saved, pos)
	return nil
}

// saveCheckpoint writes the checkpoint, leaving r.saved alone: the
// checkpointer calls it from its own goroutine.
func (r *run) saveCheckpoint(ctx context.Context, pos uint64) error {
	p := r.p
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := p.cfg.Store.SaveCheckpoint(wctx, p.cfg.Boundary, r.lease, pos)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, event.ErrLeaseLost):
		return fmt.Errorf("checkpoint %d refused: %w", pos, err)
	default:
		return fmt.Errorf("write checkpoint %d: %w", pos, err)
	}
}

// checkpointer writes the checkpoints of one drain in the background, so
// publishing never waits for a checkpoint's commit (a WAL flush on
// PostgreSQL, a turn of the single writer on SQLite): while one is written,
// the positions acknowledged meanwhile wait and go in the next write,
// together. Only acknowledged positions are handed to it, and the store
// keeps the maximum of what it is given (I3). Before, every fully
// acknowledged batch wrote its checkpoint in the publishing loop, and the
// events committed meanwhile waited behind that write.
type checkpointer struct {
	r   *run
	ctx context.Context
	// kick has room for one signal: positions were handed over.
	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	// failed is closed on the first failure, err is that failure.
	failed chan struct{}

	mu   sync.Mutex
	want uint64 // the last acknowledged position handed over
	err  error

	// written is the last position written; the goroutine's until done.
	written uint64
}

func (r *run) startCheckpointer(ctx context.Context) *checkpointer {
	c := &checkpointer{
		r: r, ctx: ctx,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), failed: make(chan struct{}),
	}
	go c.loop()
	return c
}

// save hands over an acknowledged position; it never waits.
func (c *checkpointer) save(pos uint64) {
	c.mu.Lock()
	c.want = max(c.want, pos)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// failure is the checkpointer's first failure, nil while there is none.
func (c *checkpointer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *checkpointer) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
			if !c.write() {
				<-c.quit
				return
			}
		case <-c.quit:
			c.write() // what was handed over before the stop
			return
		}
	}
}

// write writes the last position handed over, if it is new; false once a
// write failed (nothing is written after a failure: the drain ends).
func (c *checkpointer) write() bool {
	c.mu.Lock()
	pos, err := c.want, c.err
	c.mu.Unlock()
	if err != nil {
		return false
	}
	if pos <= c.written {
		return true
	}
	if err := c.r.saveCheckpoint(c.ctx, pos); err != nil {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.failed)
		return false
	}
	c.written = pos
	return true
}

// stop writes what was handed over and not yet written, ends the
// goroutine, and returns the first failure.
func (c *checkpointer) stop() error {
	close(c.quit)
	<-c.done
	c.r.saved = max(c.r.saved, c.written)
	return c.failure()
}

// finalCheckpoint saves what was acknowledged but not yet checkpointed, so a
// clean stop leaves the checkpoint at the stream's last sequence.
func (r *run) finalCheckpoint() {
	if r.acked > r.saved {
		if err := r.checkpoint(context.Background(), r.acked); err != nil {
			r.p.log.Warn("final checkpoint not written", "position", r.acked, "err", err)
		}
	}
}

// pausedReason says what JetStream refused and what an operator can do.
func pausedReason(err error) string {
	return err.Error() + " (JetStream refuses to store more: it needs memory (and, for a file store, disk) for every " +
		"boundary's stream, and orisun's streams discard old messages at their limits, so check that nobody changed the " +
		"stream's discard policy, lower ORISUN_NATS_EVENT_STREAM_MAX_BYTES or give the server more resources; nothing " +
		"is skipped, the publisher retries)"
}

// isPaused reports whether JetStream refuses for a reason of its own limits
// (a full stream with discard-new, or the server's memory or storage is
// exhausted), as opposed to a failure of orisun or the store.
func isPaused(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10077, // stream store failed: maximum messages or bytes exceeded
		10028, // insufficient memory resources
		10047, // insufficient storage resources
		10023: // insufficient resources
		return true
	}
	return false
}

// noLeaderError says that the stream has no Raft leader now (the server
// that led it is gone and the others elect one): the sync is retried every
// noLeaderRetry.
type noLeaderError struct{ err error }

func (e *noLeaderError) Error() string { return e.err.Error() }
func (e *noLeaderError) Unwrap() error { return e.err }

const noLeaderRetry = 200 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi, cur: lo} }

func (b *backoff) reset() { b.cur = b.min }

// wait sleeps for the current backoff or until ctx ends; it reports false
// when ctx ended.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.cur)
	defer t.Stop()
	b.cur = min(b.cur*2, b.max)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// headerSize is roughly what the headers add to a message on the wire.
func headerSize(h nats.Header) int {
	n := 12
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
