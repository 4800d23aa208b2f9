// The Publisher, its configuration, its lifecycle (Start, Stop: who owns
// its goroutines), and Run: one run per lease term, a loop of sync
// (sync.go) and drain (pipeline.go) that backs off on errors and says why
// in the status.

package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/startstop"
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
// HeadHolder names the transaction holding the row ("" when none does), so
// that a succession of short holders is not taken for one long one.
type HeadProber interface {
	HeadHolder(ctx context.Context, boundary string) (string, error)
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
	// CheckInterval is how often the leading publisher reads its stream's
	// info (one JetStream request) to compare the stream with orisun's
	// configuration and, while it has nothing to publish, the stream's last
	// sequence with the last position it published: a setting someone
	// changed is put back, a message someone appended or a stream someone
	// replaced is repaired from the store, within one CheckInterval and
	// without waiting for an append (docs/design.md §12). It checks at once
	// when StreamDrifted says so: a node that reads every stream in one
	// listing per poll interval sets CheckInterval long (its backstop), as
	// it does PollInterval. Zero: ProbeInterval.
	CheckInterval time.Duration
	// AckTimeout bounds the wait for one acknowledgement.
	AckTimeout time.Duration
	// LeaseTTL is what the fence renews the lease for before it deletes,
	// purges or recreates the stream (the node's ORISUN_LEASE_TTL; 10s
	// when zero).
	LeaseTTL time.Duration
	// MsgID sets Nats-Msg-Id to the event id.
	MsgID bool
	// Wake receives a value when the boundary may have new events: for a
	// commit, only once its events can be read (backend.Notifier's
	// OnAppend is called after the commit). The publisher takes a pending
	// value before each read, as answered by that read.
	Wake   <-chan struct{}
	Logger *slog.Logger

	// AfterAck, when set, is called once a batch is fully acknowledged and
	// before its checkpoint is written. Tests use it as a fault point.
	AfterAck func(last uint64)
	// OnPublished, when set, is told of every fully acknowledged batch:
	// its events, its last position, the time from sending its first
	// message to the acknowledgement of its last, and whether it went as
	// one fast-ingest batch (batch.go) rather than as single publishes
	// (the node's metrics and the console's history). It must not block.
	OnPublished func(events int, last uint64, took time.Duration, fast bool)
	// OnFound, when set, is told of the events a sync finds in the stream
	// after the checkpoint that neither OnPublished nor OnFound was told
	// of in this epoch: published by a run that ended before it awaited
	// their acknowledgements (a failed checkpoint write ends a run with
	// batches in flight), or by another node before a takeover. It is
	// told before the checkpoint moves past them. With OnPublished, every
	// event in the stream after the checkpoint this publisher first
	// synced from is told of at least once (an event republished after a
	// repair may be told of again). It must not block.
	OnFound func(events int, last uint64)

	// CheckpointBeforeAck breaks the publisher on purpose: each batch's
	// checkpoint is written before the batch is published, so before any
	// acknowledgement. It exists only for the fault suite's negative
	// control of C6 (cmd/orisun's faultinject build sets it from
	// ORISUN_FAULT_CHECKPOINT_BEFORE_ACK); nothing else may set it.
	CheckpointBeforeAck bool
}

// Publisher relays one boundary's events into its stream.
type Publisher struct {
	cfg Config
	log *slog.Logger
	// batches counts the pages published as one batch (batch.go).
	batches atomic.Uint64
	// told is the last position of the epoch toldEpoch that OnPublished
	// or OnFound was told of, across runs (see tell); toldMu
	// guards both.
	toldMu    sync.Mutex
	toldEpoch string
	told      uint64

	// life owns every goroutine of the publisher: each Run's, its
	// prefetches and the removal of its verification readers. ctx ends at
	// Stop, or when Start's context ends: it ends every Run in progress,
	// and the removals; unlink undoes Start's tie to its context.
	life   startstop.Base
	ctx    context.Context
	cancel context.CancelFunc
	unlink func() bool

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
	// checkHead asks the idle publisher, woken, to read the boundary's
	// head: Behind saw one below caughtUp (see headWentBack).
	checkHead atomic.Bool
	// want is the stream configuration of the running publisher's last
	// sync, nil while it does not run. checkConfig and checkContent ask it
	// to check its stream at its next chance (StreamDrifted): the
	// configuration, or, when idle, the content too.
	want                      atomic.Pointer[jetstream.StreamConfig]
	checkConfig, checkContent atomic.Bool
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
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = cfg.ProbeInterval
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
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.state = Status{State: status.StateStandby, Reason: "not leading", Since: time.Now().UTC()}
	return p
}

// Start ties the publisher to ctx: when ctx ends, every Run in progress
// ends as Stop ends it. A publisher may Run from New on (its lease runner
// drives it); Start and Stop are what its owner uses to end it whatever
// runs. A second Start does nothing; a Start after Stop fails.
func (p *Publisher) Start(ctx context.Context) error {
	if err := p.life.Start(ctx, p.start, p.halt); err != nil {
		return fmt.Errorf("publisher %q: %w", p.cfg.Boundary, err)
	}
	return nil
}

func (p *Publisher) start(ctx context.Context) error {
	p.unlink = context.AfterFunc(ctx, p.cancel)
	return nil
}

// Stop ends every Run in progress as the end of its context does (each
// finishes the batch in flight and checkpoints it), waits for them and for
// every goroutine the publisher started, and makes later Runs fail with
// event.ErrClosed. Safe to call twice, concurrently, and before Start.
func (p *Publisher) Stop() error { return p.life.Stop(p.halt) }

func (p *Publisher) halt() error {
	p.cancel()
	if p.unlink != nil {
		p.unlink()
	}
	return nil
}

// Run publishes while ctx lives, as the holder of lease. When ctx ends it
// finishes sending the batch it is sending, awaits everything in flight (at
// most Window messages after the last send, of that batch and the one
// before it), checkpoints it and returns, reading and sending nothing more.
// It returns nil on a clean stop, event.ErrLeaseLost when a checkpoint write
// was refused because the lease term is stale (a newer publisher exists).
//
// The run itself is a goroutine of the publisher, so that Stop waits for
// it; Run waits for it in turn.
func (p *Publisher) Run(ctx context.Context, lease backend.Lease) error {
	if p.life.State() == startstop.Stopped {
		return p.errStopped()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	done := make(chan error, 1)
	if !p.life.Go(func() { done <- p.run(rctx, ctx, lease) }) {
		return p.errStopped()
	}
	return <-done
}

func (p *Publisher) errStopped() error {
	return fmt.Errorf("publisher %q: run after stop: %w", p.cfg.Boundary, event.ErrClosed)
}

// run is Run on the publisher's goroutine. ctx ends with Run's context
// (parent) or at Stop; the status reports why parent ended (its cause), and
// a Stop as a clean stop.
func (p *Publisher) run(ctx, parent context.Context, lease backend.Lease) error {
	r := &run{p: p}
	r.lease.Store(&lease)
	p.idle.Store(false)
	p.markProgress()
	err := r.loop(ctx)
	p.progress.Store(0)
	p.want.Store(nil)
	cause := context.Cause(parent)
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
	p *Publisher
	// lease is the lease the run holds, renewed by each fence; the
	// checkpointer reads it from its own goroutine.
	lease atomic.Pointer[backend.Lease]
	epoch string
	// acked is the last position JetStream acknowledged; saved the last
	// checkpoint written.
	acked, saved uint64
	// heldSince is when the head row was first seen held by heldBy, an
	// append transaction, while there was nothing to publish.
	heldSince time.Time
	heldBy    string
	// synced is true once a sync of this run succeeded; known is the
	// stream's last sequence that sync left (the run's own, or proven to
	// be the store's): with acked, what this run knows the stream holds
	// (see aheadOfStore).
	synced bool
	known  uint64
	// want is the stream configuration of the last sync. A replica count
	// JetStream refused (replicasWarning) is tried again at configRetry,
	// waiting configWait longer each time (up to a minute): a refusal may
	// pass (a cluster still forming, a peer down).
	want            jetstream.StreamConfig
	configRetry     time.Time
	configWait      time.Duration
	replicasWarning string
	// checked is when the stream was last checked (see check). drifting is
	// true from a drift that sent the run back to the sync until the
	// stream passes a check while idle or takes a batch: a drift meanwhile
	// is a repair that did not hold. putBackRefused is true while a drifted
	// setting is not put back (JetStream refused, or the put-back waits).
	checked                  time.Time
	drifting, putBackRefused bool
	// limitsHold is the wait of the consumer limits' put-back, which
	// runs apart (putBackConsumerLimits).
	limitsHold putBackHold
	// putBacks are the times of this run's put-backs within putBackWindow;
	// putBackHold is when the next may run (see putBackHeld).
	putBacks    []time.Time
	putBackHold putBackHold
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
	backoff := serviceutil.NewBackoff(100*time.Millisecond, 5*time.Second)
	defer r.finalCheckpoint()
	for ctx.Err() == nil {
		next, err := r.sync(ctx)
		if errors.Is(err, event.ErrLeaseLost) {
			return err
		}
		if err == nil {
			r.synced, r.known = true, next-1
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
				if !serviceutil.Sleep(ctx, noLeaderRetry) {
					return nil
				}
				continue
			}
			if !p.failed(ctx, err, backoff) {
				return nil
			}
			continue
		}
		err = r.drain(ctx, next)
		if errors.Is(err, event.ErrLeaseLost) {
			return err
		}
		var drift *driftError
		if errors.As(err, &drift) && ctx.Err() == nil {
			// The stream is not as this run left it: the sync repairs it,
			// at once. A drift again before the stream passed a check or
			// took a batch (the repair did not hold: a subject another
			// stream took, a writer that keeps writing) is a stall,
			// retried every ProbeInterval (a node's poll interval), the
			// status naming the cause while it lasts.
			//
			// Either way the stream is checked again at the first
			// chances after the sync, publishing and idle, to see that the
			// repair held.
			p.checkConfig.Store(true)
			p.checkContent.Store(true)
			if !r.drifting {
				r.drifting = true
				p.setState(status.StateLeading, "repairing the stream: "+err.Error(), nil)
				p.log.Warn("stream differs from the store or from orisun's configuration: repairing it", "why", err.Error())
				continue
			}
			p.setState(status.StateStalled, err.Error(), err)
			if !serviceutil.Sleep(ctx, p.cfg.ProbeInterval) {
				return nil
			}
			continue
		}
		if err != nil && ctx.Err() == nil {
			if !p.failed(ctx, err, backoff) {
				return nil
			}
			continue
		}
		backoff.Reset()
	}
	return nil
}

// failed records a failed sync or drain, paused (JetStream refuses for its
// own limits) or stalled, and waits the backoff's next wait before the
// retry. It returns false when ctx ended meanwhile.
func (p *Publisher) failed(ctx context.Context, err error, backoff *serviceutil.Backoff) bool {
	if isPaused(err) {
		p.setState(status.StatePaused, pausedReason(err), err)
	} else {
		p.setState(status.StateStalled, err.Error(), err)
	}
	return backoff.Wait(ctx)
}
