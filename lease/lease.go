// Package lease keeps a node's lease on a boundary (docs/design.md §9) and runs the
// boundary's leader work only while the lease is held.
// It is orisun's machinery, not for import by applications: its API may
// change without notice, and such a change is not a breaking change of
// orisun.
//
// States of one boundary on one node:
//
//	standby ──acquire ok──▶ leading ──renew refused / expired locally──▶ standby
//	   ▲                       │
//	   ├──── ctx ends: the leader work returns, the lease is released ─┘
//	   │                       │
//	   └── hold-off ◀── stalled (Runner.Stalled): work stopped, lease released
//	                    (after any fenced section in flight, see EnterFence)
//
// A hold-off lasts two TTLs, growing with step-downs in a row after which
// another node took the lease, and ends early once the lease has been free
// for a TTL: a stall that hits every node must not leave the boundary with
// nobody trying.
//
// The lease is acquired and renewed in the store's time; renewal runs every
// TTL/3. Safety never depends on the lease: the publisher's checkpoint write is
// fenced by the term, and its publishes by the expected last sequence. The
// lease keeps two nodes from wasting work; losing it cancels the leader's
// context so it stops within one renewal period.
//
// Two things spare a standby its wait. A node stopping cleanly releases its
// leases, and the store announces each release (PostgreSQL NOTIFY), which
// wakes the standbys (Runner.Released) to acquire at once; with placement a
// woken standby first counts the nodes again (Runner.Recount), and since
// the stopping node left the count before it released, it finds its share
// grown and does not yield the lease. A node restarted
// after a crash knows its previous process's holder name from its data
// directory's lock file (Runner.Gone): the lock it now holds proves that
// process has ended, so it takes that process's unexpired leases at once,
// with the next term, and logs why.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/startstop"
)

// Runner holds leases for one node. Run competes for one boundary's lease
// until its context ends; Start runs it for Boundary, Lead and Standby on a
// goroutine of the runner's own, and Stop ends it (startstop.Base).
type Runner struct {
	Store  backend.Leases
	Holder string
	TTL    time.Duration
	Logger *slog.Logger

	// Gone, when set, names holders known to have ended: the earlier
	// processes of the data directory this node has locked
	// (docs/design.md §9). A lease one of them still holds is taken at
	// once, with the next term, instead of after its expiry, and the log
	// says so. It is asked before each acquisition, so a name found to be
	// alive after all (a cloned volume's lock file) can be withdrawn.
	Gone func() []string
	// Released, when set, is a hint that the lease may have been released
	// (backend.ReleaseNotifier): a standby tries to acquire at once
	// instead of at its next retry, TTL/3 later. A clean stop of the
	// leader thus hands the lease over within a round trip or two.
	Released <-chan struct{}

	// Boundary, Lead and Standby are what Start runs: Run's arguments.
	Boundary string
	Lead     func(ctx context.Context, l backend.Lease) error
	Standby  Observer

	// Yield, when set, is asked before each acquisition: true means this
	// node leads its fair share already and should leave a free lease to
	// a node that leads fewer. It is a placement hint, never safety: after
	// two yielded attempts in a row the next one acquires anyway, so a
	// wrong count cannot leave a boundary without a publisher for long.
	Yield func() bool
	// Recount, when set, is called after a release wake-up (Released),
	// before Yield is asked again: placement counts the live nodes anew
	// and returns once it has. A node that stops cleanly removes itself
	// from the count before it releases its leases, so the count a
	// woken standby then sees has grown its share, and it takes the lease
	// at once instead of yielding it for another retry to a node that is
	// leaving. Yielding waits end on a release wake-up too.
	Recount func(ctx context.Context)
	// StepDown, when set, is asked after each renewal: true means this
	// node leads more than its share and gives this lease up (the leader
	// work stops, the lease is released, another node takes it).
	StepDown func() bool
	// Stalled, when set, is asked after each renewal: a reason means the
	// leader work has made no progress for too long while another node
	// could do it (a shared NATS). The work stops, the lease is released
	// (after any fenced section in flight, see EnterFence), and this node
	// leaves it alone for a hold-off (two TTLs, doubling with each
	// step-down in a row after which another node took the lease, up to
	// sixteen), so another node takes it; a renewing node that cannot
	// publish would otherwise keep the boundary from everyone. The
	// hold-off ends early when the lease stays free for a TTL: nobody else
	// took it (see holdOff).
	Stalled func() string

	// life owns the goroutines: Start's Run, and each term's leader work.
	// Every Run's context also ends with ctx, which Stop ends (end); once
	// makes them, for a Runner is used as a struct literal.
	life startstop.Base
	once sync.Once
	ctx  context.Context
	end  context.CancelFunc
}

// Start runs Run(ctx, Boundary, Lead, Standby) in the background until ctx
// ends or Stop. A second Start does nothing; a Start after Stop fails.
func (r *Runner) Start(ctx context.Context) error {
	if err := r.life.Start(ctx, r.start, r.halt); err != nil {
		return fmt.Errorf("lease runner of %q: %w", r.Boundary, err)
	}
	return nil
}

func (r *Runner) start(ctx context.Context) error {
	if r.Boundary == "" || r.Lead == nil {
		return errors.New("a runner needs Boundary and Lead to start")
	}
	r.life.Go(func() { r.Run(ctx, r.Boundary, r.Lead, r.Standby) })
	return nil
}

// Stop ends every Run in progress (Start's and any other): the leader work
// returns and the lease is released, as when Run's context ends. It returns
// once every goroutine of the runner has ended. Safe to call twice,
// concurrently, and before Start.
func (r *Runner) Stop() error { return r.life.Stop(r.halt) }

func (r *Runner) halt() error {
	r.lifeContext()
	r.end()
	return nil
}

// lifeContext is the context that ends at Stop.
func (r *Runner) lifeContext() context.Context {
	r.once.Do(func() { r.ctx, r.end = context.WithCancel(context.Background()) })
	return r.ctx
}

// SteppedDownError is what the leader work's context and the standby
// observer are told when this node gave a lease up because its leader work
// was stalled (Runner.Stalled).
type SteppedDownError struct {
	Why       string
	At, Until time.Time // when it stepped down; when it seeks the lease again
}

func (e *SteppedDownError) Error() string {
	return fmt.Sprintf("stepped down at %s (%s) and left the lease to another node until %s",
		e.At.UTC().Format(time.RFC3339), e.Why, e.Until.UTC().Format(time.RFC3339))
}

// ErrYielded is what the standby observer is told when this node left a
// lease to others (Runner.Yield).
var ErrYielded = errors.New("leaving the lease to a node that leads fewer boundaries")

// Observer is told about standby periods: who holds the lease instead.
type Observer func(holder backend.Lease, err error)

// Run competes for the boundary's lease until ctx ends (or the runner is
// stopped). While this node holds it, lead runs with a context that ends
// when the lease is lost or ctx ends; lead must return promptly then. On a
// clean stop the lease is released so that a standby can take over at once.
func (r *Runner) Run(ctx context.Context, boundary string, lead func(ctx context.Context, l backend.Lease) error, standby Observer) {
	if r.life.State() == startstop.Stopped {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.lifeContext(), cancel)()
	log := r.logger().With("boundary", boundary, "holder", r.Holder)
	retry := max(r.TTL/3, 50*time.Millisecond)
	failing := false // log a failing acquisition once, not every retry
	yielded := 0
	steppedDown := 0 // step-downs in a row, for the hold-off
	woken := false   // the last wait ended with a release wake-up
	for ctx.Err() == nil {
		if woken && r.Recount != nil {
			r.Recount(ctx)
		}
		woken = false
		if r.Yield != nil && yielded < 2 && r.Yield() {
			yielded++
			if standby != nil {
				// The holder is still reported, so the node knows whether
				// someone feeds the boundary's stream.
				cur, err := r.Store.LeaseHolder(ctx, boundary)
				switch {
				case err != nil:
					standby(cur, err)
				case cur.Holder != "" && cur.Holder != r.Holder && cur.Expires.After(time.Now()):
					// (The expiry is in the store's clock: good enough
					// for a hint; a released lease expired at time 0.)
					standby(cur, event.ErrLeaseHeld)
				default:
					standby(cur, ErrYielded)
				}
			}
			var ok bool
			if woken, ok = r.wait(ctx, retry, true); !ok {
				return
			}
			continue
		}
		yielded = 0
		var gone []string
		if r.Gone != nil {
			gone = r.Gone()
		}
		acquired := time.Now()
		l, err := r.Store.AcquireLease(ctx, boundary, r.Holder, gone, r.TTL)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if standby != nil {
				standby(l, err)
			}
			held := errors.Is(err, event.ErrLeaseHeld)
			if !held && !failing {
				log.Warn("lease acquisition failing; retrying", "err", err)
			}
			failing = !held
			var ok bool
			if woken, ok = r.wait(ctx, retry, held); !ok {
				return
			}
			continue
		}
		if failing {
			log.Info("lease acquisition works again")
			failing = false
		}
		if was := l.TakenFrom; was != nil {
			log.Info("lease taken over at once: its holder was an earlier process of this node's data directory, "+
				"whose lock this process now holds, so that process has ended; its lease was not left to expire",
				"term", l.Term, "previous_holder", was.Holder, "previous_term", was.Term,
				"previous_expiry", was.Expires.Format(time.RFC3339Nano))
		} else {
			log.Info("lease acquired", "term", l.Term)
		}
		holdOff := 2 * r.TTL << min(steppedDown, 3)
		sd := r.hold(ctx, l, acquired, holdOff, lead, standby, log)
		if sd == nil {
			steppedDown = 0
			continue
		}
		if r.holdOff(ctx, boundary, l.Term, sd, standby, log) {
			steppedDown++
		}
	}
}

// wait waits retry before the next attempt, or less when wakeable (another
// holder has the lease, or this node yielded it) and Released says a lease
// was released: then woken is true. ok is false when ctx ended.
func (r *Runner) wait(ctx context.Context, retry time.Duration, wakeable bool) (woken, ok bool) {
	if !wakeable || r.Released == nil {
		return false, serviceutil.Sleep(ctx, retry)
	}
	t := time.NewTimer(retry)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return false, true
	case <-r.Released:
		return true, true
	}
}

// holdOff keeps this node out of the race after it stepped down, until
// sd.Until, so that another node takes the lease; the observer hears who
// holds it meanwhile. It reports whether another node took the lease.
//
// The hold-off ends early once the lease has been free (released or
// expired) for a TTL: nobody else took it, so the others cannot or are
// holding off too (a stall that affects every node: the stream offline, no
// JetStream quorum). Without that, nodes taking turns to step down would
// all hold off at once, with hold-offs growing, and leave the boundary
// without a publisher for many TTLs. A node that leads stalled is no worse
// than none, and it notices when the stall ends. Likewise the hold-off only
// escalates (the caller counts the step-downs) when another node took the
// lease: a node that steps down from a lease nobody else wants learns
// nothing about its own health.
func (r *Runner) holdOff(ctx context.Context, boundary string, left uint64, sd *SteppedDownError, standby Observer, log *slog.Logger) (taken bool) {
	retry := max(r.TTL/3, 50*time.Millisecond)
	var freeSince time.Time // when the lease was first seen free, in a row
	for ctx.Err() == nil && time.Now().Before(sd.Until) {
		cur, err := r.Store.LeaseHolder(ctx, boundary)
		now := time.Now()
		switch {
		case err != nil:
			freeSince = time.Time{} // cannot tell
		case cur.Holder == "" || !cur.Expires.After(now):
			// Free: released (expired at the epoch) or run out. The
			// expiry is in the store's clock: good enough for a hint.
			if freeSince.IsZero() {
				freeSince = now
			}
		default:
			freeSince = time.Time{}
			if cur.Term > left && cur.Holder != r.Holder {
				taken = true
			}
		}
		if standby != nil {
			if err != nil {
				standby(cur, fmt.Errorf("%w; lease not read: %w", sd, err))
			} else {
				standby(cur, sd)
			}
		}
		if !freeSince.IsZero() && now.Sub(freeSince) >= r.TTL {
			log.Info("hold-off ended early: the lease has been free for a TTL and no other node took it",
				"free_for", now.Sub(freeSince).Round(time.Millisecond), "hold_off_left", sd.Until.Sub(now).Round(time.Millisecond))
			return taken
		}
		wait := min(retry, time.Until(sd.Until))
		if !freeSince.IsZero() {
			// Wake when the free period reaches a TTL, not a retry later.
			wait = min(wait, max(freeSince.Add(r.TTL).Sub(now), time.Millisecond))
		}
		if !serviceutil.Sleep(ctx, wait) {
			return taken
		}
	}
	return taken
}

// hold runs lead while renewing l. It returns the reason when it stepped
// down because the leader work stalled (Runner.Stalled), nil otherwise.
func (r *Runner) hold(ctx context.Context, l backend.Lease, acquired time.Time, holdOff time.Duration,
	lead func(ctx context.Context, l backend.Lease) error, standby Observer, log *slog.Logger) *SteppedDownError {
	// The cause tells lead why its context ended: a lost or locally
	// expired lease is not a stop, and the publisher's status says which.
	lctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	t := &term{cancel: cancelCause, fences: newFences(), done: make(chan error, 1)}
	if !r.life.Go(func() { t.done <- lead(context.WithValue(lctx, fenceKey{}, t.fences), l) }) {
		// The runner is stopping: nothing leads under this term.
		cancel()
		r.release(l, log)
		return nil
	}

	// The local deadline: acquired is taken before the acquisition call,
	// so the node never trusts the lease longer than the store does.
	// Safety never depends on it (the checkpoint is fenced by the term,
	// publishes by the expected last sequence).
	deadline := acquired.Add(r.TTL)
	tick := time.NewTicker(max(r.TTL/3, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case err := <-t.done:
			cancel()
			if err != nil && !errors.Is(err, event.ErrLeaseLost) {
				log.Warn("leader work ended with an error", "term", l.Term, "err", err)
			}
			if errors.Is(err, event.ErrLeaseLost) {
				log.Warn("lease lost: a newer term exists; stepping down", "term", l.Term, "err", err)
				return nil
			}
			r.release(l, log)
			return nil
		case <-tick.C:
			start := time.Now()
			// Bounded by the local deadline: a database that stops
			// answering must not keep this node leading past its lease.
			rctx, rcancel := context.WithDeadline(lctx, deadline)
			nl, err := r.Store.RenewLease(rctx, l, r.TTL)
			rcancel()
			switch {
			case err == nil:
				l, deadline = nl, start.Add(r.TTL)
				if r.StepDown != nil && lctx.Err() == nil && r.StepDown() {
					log.Info("stepping down: this node leads more than its share of boundaries", "term", l.Term)
					cancel() // lead returns; done releases the lease
				}
				if r.Stalled != nil && lctx.Err() == nil {
					if why := r.Stalled(); why != "" {
						return r.stepDownStalled(t, l, why, holdOff, standby, log)
					}
				}
			case errors.Is(err, event.ErrLeaseLost):
				log.Warn("lease lost on renewal: stepping down", "term", l.Term)
				cancelCause(fmt.Errorf("lease term %d lost on renewal: %w", l.Term, err))
				<-t.done
				return nil
			case lctx.Err() != nil:
				// Stopping: lead is returning; done follows.
			default:
				log.Warn("lease renewal failed", "term", l.Term, "err", err)
				if time.Now().After(deadline) {
					log.Warn("lease expired locally: stepping down", "term", l.Term)
					cancelCause(&ExpiredError{TTL: r.TTL, Err: err})
					<-t.done
					return nil
				}
			}
		}
	}
}

// term is the leader work of one held lease, as hold runs it.
type term struct {
	cancel context.CancelCauseFunc // ends the work's context, with a cause
	fences *fences                 // the work's fenced sections (EnterFence)
	done   chan error              // the work's result
}

// stepDownStalled gives the lease l up because the leader work stalled
// (Runner.Stalled said why): the work's context ends with a
// *SteppedDownError, the lease is released, the observer hears it, and it
// returns that error once the work has returned.
//
// The lease is released before the work returns: a stalled publisher may
// hang in a call (an acknowledgement that never comes) for a while, and
// the lease is what keeps the others out. Safety never rests on it: a late
// publish is refused by its expected last sequence, a late checkpoint only
// records what JetStream acknowledged and is fenced by the term (I2, I3).
// A delete or purge checks no sequence, though: a fenced one in flight
// (see EnterFence) ends first, within its renewed lease, and no new one
// starts.
func (r *Runner) stepDownStalled(t *term, l backend.Lease, why string, holdOff time.Duration, standby Observer, log *slog.Logger) *SteppedDownError {
	now := time.Now()
	sd := &SteppedDownError{Why: why, At: now, Until: now.Add(holdOff)}
	log.Warn("stepped down: the leader work made no progress; lease released for another node",
		"term", l.Term, "why", why, "retry_after", holdOff)
	t.cancel(sd)
	returned := false
	select {
	case <-t.fences.close():
	case <-t.done:
		returned = true
	}
	r.release(l, log)
	if standby != nil {
		standby(l, sd)
	}
	if !returned {
		<-t.done
	}
	return sd
}

func (r *Runner) release(l backend.Lease, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Store.ReleaseLease(ctx, l); err != nil {
		log.Warn("lease not released; it will expire", "term", l.Term, "err", err)
		return
	}
	log.Info("lease released", "term", l.Term)
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

// Describe says who holds a lease, for status reasons.
func Describe(l backend.Lease) string {
	if l.Holder == "" {
		return "no holder"
	}
	return fmt.Sprintf("%s (term %d)", l.Holder, l.Term)
}

// ExpiredError is the cause given to the leader's context when the lease
// could not be renewed before it expired: the store did not answer in time.
// It is not a stop and not a newer holder; the node is stuck until the
// store answers again.
type ExpiredError struct {
	TTL time.Duration
	Err error
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("lease expired locally: not renewed within %s: %v", e.TTL, e.Err)
}

func (e *ExpiredError) Unwrap() error { return e.Err }
