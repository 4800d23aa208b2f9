package orisun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/metrics"
	"github.com/orisun-io/orisun/internal/serviceutil"
)

// The store watch: every store operation of the node goes through a
// wrapper of the store that counts the failures (orisun_store_errors_total)
// and keeps, per kind of work, whether the store fails it. A read of the
// status alone cannot see a write outage: with its disk full, SQLite still
// answers reads (and a lease renewal, which rewrites a page it has, may
// still commit) while every append fails. So the outcome of the writes
// themselves decides: while the last append, checkpoint, lease write,
// boundary creation or read failed for the store's sake, the status says
// store.ok false with the error and since when, the node is not settled
// and /readyz answers 503. Each change is logged once: ERROR when a kind
// starts failing, WARN when it works again.
//
// A success ends a kind's failure once no operation of it failed for
// storeSettle (at once when the last failure is older; else when the node
// next looks, within a poll interval): a store going down or coming back
// answers some operations and fails others for a moment (PostgreSQL ending
// its sessions one by one), and the state, the log and /readyz must not
// flap with them.
//
// A kind that nobody exercises any more would stay failing for ever (no
// appends, no successful append), and a node that is not ready gets no
// traffic: so while something fails, the node probes the store with a
// write of its own (backend probeWrite) every poll interval, and a probe
// that succeeds clears every kind not tried for storeIdle. A kind still
// being tried is judged by its own outcomes only.

// Store work kinds, indexes in metrics.StoreKinds.
const (
	kindRead = iota
	kindAppend
	kindCheckpoint
	kindLease
	kindBoundary
	nKinds
	kindNone = -1
)

// kindWords name the kinds in the status and the log.
var kindWords = [nKinds]string{"reads", "appends", "checkpoint writes", "lease writes", "boundary creations"}

// storeIdle is how long a failing kind must go untried before a successful
// probe speaks for it; storeSettle how long it must go without a failure
// before a success of its own ends its failure.
const (
	storeIdle   = 5 * time.Second
	storeSettle = time.Second
)

// writeProber is a store that can check that it takes a write now, without
// changing anything a reader sees (each backend says what it writes).
type writeProber interface {
	ProbeWrite(ctx context.Context) error
}

// kindState is one kind's state while it fails.
type kindState struct {
	failing bool
	since   time.Time // when it began to fail
	op      string    // the operation that failed last
	err     string    // its error
	failed  time.Time // when it failed last
	ok      time.Time // when it last succeeded (while failing)
	tried   time.Time // its last attempt, failed or not
}

// storeWatch keeps the store's health from the outcomes of its operations.
type storeWatch struct {
	log *slog.Logger
	m   *metrics.Metrics
	// failing counts the kinds that fail: a success looks at it alone
	// (one atomic load) while nothing fails.
	failing atomic.Int32
	mu      sync.Mutex
	kinds   [nKinds]kindState
}

func newStoreWatch(log *slog.Logger, m *metrics.Metrics) *storeWatch {
	return &storeWatch{log: log, m: m}
}

// storeFault reports whether err, the outcome of a store operation of a
// kind (kindNone: the write probe), is the store's failure, as opposed to
// an answer (a conflict, a missing boundary, a lease held or lost, a bad
// row: the store works, the row is wrong, and the boundary's publisher
// stalls on it, docs/operations.md "A bad row"), a node that is closing, or
// a caller that gave up: its context cancelled, or its own deadline passed
// (Node.Append with a timeout of the application's, a subscription's
// short look at the store). A deadline the node set on its own work is the
// store's failure: it did not answer in time (ownDeadline).
func storeFault(ctx context.Context, kind int, err error) bool {
	if err == nil || (ctx.Err() != nil && !ownDeadline(ctx, kind)) {
		return false
	}
	for _, answer := range []error{event.ErrInvalid, event.ErrTooLarge, event.ErrNotFound, event.ErrConflict,
		event.ErrLeaseLost, event.ErrLeaseHeld, event.ErrEpochChanged, event.ErrClosed, event.ErrCorrupt} {
		if errors.Is(err, answer) {
			return false
		}
	}
	return true
}

// ownDeadline reports whether ctx, which ended, ended with a deadline the
// node set on its own work: any deadline of lease writes and checkpoint
// writes (the lease manager's and the publisher's, never a caller's), and
// for the kinds a caller's request reaches (reads, appends, boundary
// creations) those marked by serviceutil.WithTimeout (the API's request
// timeout, the status listener's measurement, the node's own reads).
func ownDeadline(ctx context.Context, kind int) bool {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	return kind == kindLease || kind == kindCheckpoint || serviceutil.OwnDeadline(ctx)
}

// done records the outcome of a store operation of a kind (kindNone: count
// it only).
func (w *storeWatch) done(ctx context.Context, op metrics.StoreOp, kind int, err error) {
	if err == nil {
		if kind != kindNone && w.failing.Load() != 0 {
			w.succeeded(kind)
		}
		return
	}
	if !storeFault(ctx, kind, err) {
		return
	}
	w.m.StoreError(op)
	if kind != kindNone {
		w.failed(kind, metrics.StoreOps[op], err)
	}
}

func (w *storeWatch) failed(kind int, op string, err error) {
	now := time.Now()
	w.mu.Lock()
	k := &w.kinds[kind]
	first := !k.failing
	if first {
		k.failing, k.since = true, now
		w.failing.Add(1)
	}
	k.op, k.err, k.failed, k.tried = op, err.Error(), now, now
	w.mu.Unlock()
	if first {
		w.m.StoreFailing(kind, true)
		w.log.Error("store failing: "+kindWords[kind]+" fail; the status says store.ok false and /readyz answers 503 "+
			"until they succeed again", "kind", metrics.StoreKinds[kind], "op", op, "err", err)
	}
}

func (w *storeWatch) succeeded(kind int) {
	w.mu.Lock()
	k := &w.kinds[kind]
	now := time.Now()
	k.tried = now
	if !k.failing {
		w.mu.Unlock()
		return
	}
	k.ok = now
	if now.Sub(k.failed) >= storeSettle {
		w.clear(kind, "")
	}
	w.mu.Unlock()
}

// settle ends the failure of the kinds whose last operation succeeded and
// whose last failure is storeSettle old at now.
func (w *storeWatch) settle(now time.Time) {
	if w.failing.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for kind := range w.kinds {
		if k := &w.kinds[kind]; k.failing && k.ok.After(k.failed) && now.Sub(k.failed) >= storeSettle {
			w.clear(kind, "")
		}
	}
}

// clear ends a kind's failure (w.mu held); by names a probe that stood in
// for it.
func (w *storeWatch) clear(kind int, by string) {
	k := &w.kinds[kind]
	failedFor := time.Since(k.since).Round(time.Millisecond)
	lastErr := k.err
	*k = kindState{tried: k.tried}
	w.failing.Add(-1)
	w.m.StoreFailing(kind, false)
	msg := "store works again: " + kindWords[kind] + " succeed"
	if by != "" {
		msg = "store works again: " + by + " (no " + strings.TrimSuffix(kindWords[kind], "s") + " tried since the failure)"
	}
	w.log.Warn(msg, "kind", metrics.StoreKinds[kind], "failed_for", failedFor, "last_err", lastErr)
}

// probed records a successful probe that started at start: it clears the
// failing kinds not tried for storeIdle before it.
func (w *storeWatch) probed(start time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for kind := range w.kinds {
		if k := &w.kinds[kind]; k.failing && k.tried.Before(start.Add(-storeIdle)) {
			w.clear(kind, "a write probe succeeded")
		}
	}
}

// health says whether any kind fails: since when (the earliest), and what
// fails, in words.
func (w *storeWatch) health() (ok bool, since time.Time, what string, readsFail bool) {
	w.settle(time.Now())
	if w.failing.Load() == 0 {
		return true, time.Time{}, "", false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for kind, k := range w.kinds {
		if !k.failing {
			continue
		}
		if since.IsZero() || k.since.Before(since) {
			since = k.since
		}
		parts = append(parts, fmt.Sprintf("%s fail since %s (%s): %s", kindWords[kind],
			k.since.UTC().Format(time.RFC3339), k.op, k.err))
	}
	return len(parts) == 0, since, strings.Join(parts, "; "), w.kinds[kindRead].failing
}

// watch settles the failing kinds and runs the write probe (p nil: none)
// every interval while a kind fails, until ctx ends.
func (w *storeWatch) watch(ctx context.Context, p writeProber, interval time.Duration) {
	for serviceutil.Sleep(ctx, interval) {
		w.settle(time.Now())
		if p != nil && w.failing.Load() != 0 {
			start := time.Now()
			pctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
			err := p.ProbeWrite(pctx)
			cancel()
			switch {
			case err == nil:
				w.probed(start)
			case storeFault(ctx, kindNone, err):
				w.m.StoreError(metrics.OpProbeWrite)
			}
		}
	}
}

// watchedStore is the store seen through a storeWatch. The wrapper keeps
// the optional interfaces the node and the publisher look for (see
// watchStore).
type watchedStore struct {
	backend.Store
	w *storeWatch
}

// watchStore wraps s, keeping the optional interfaces of s that the node
// uses: backend.StateReader (the status's one-statement measurement) and
// the publisher's HeadProber. Each optional interface is a piece of its
// own (watchedStates, watchedProbe) embedded beside the watchedStore only
// when s has it.
func watchStore(s backend.Store, w *storeWatch) backend.Store {
	ws := watchedStore{Store: s, w: w}
	sr, states := s.(backend.StateReader)
	hp, probes := s.(headProber)
	switch {
	case states && probes:
		return struct {
			watchedStore
			watchedStates
			watchedProbe
		}{ws, watchedStates{w, sr}, watchedProbe{w, hp}}
	case states:
		return struct {
			watchedStore
			watchedStates
		}{ws, watchedStates{w, sr}}
	case probes:
		return struct {
			watchedStore
			watchedProbe
		}{ws, watchedProbe{w, hp}}
	default:
		return ws
	}
}

// headProber is publisher.HeadProber.
type headProber interface {
	HeadHolder(ctx context.Context, boundary string) (string, error)
}

// watchedStates is backend.StateReader seen through a storeWatch.
type watchedStates struct {
	w  *storeWatch
	sr backend.StateReader
}

func (s watchedStates) BoundaryStates(ctx context.Context) ([]backend.BoundaryState, error) {
	r, err := s.sr.BoundaryStates(ctx)
	s.w.done(ctx, metrics.OpBoundaryStates, kindRead, err)
	return r, err
}

// watchedProbe is a headProber seen through a storeWatch.
type watchedProbe struct {
	w  *storeWatch
	hp headProber
}

func (s watchedProbe) HeadHolder(ctx context.Context, boundary string) (string, error) {
	r, err := s.hp.HeadHolder(ctx, boundary)
	s.w.done(ctx, metrics.OpHeadLocked, kindRead, err)
	return r, err
}

func (s watchedStore) CreateBoundary(ctx context.Context, name string) (event.Boundary, bool, error) {
	b, created, err := s.Store.CreateBoundary(ctx, name)
	s.w.done(ctx, metrics.OpCreateBoundary, kindBoundary, err)
	return b, created, err
}

func (s watchedStore) Boundary(ctx context.Context, name string) (event.Boundary, error) {
	b, err := s.Store.Boundary(ctx, name)
	s.w.done(ctx, metrics.OpBoundary, kindRead, err)
	return b, err
}

func (s watchedStore) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	bs, err := s.Store.Boundaries(ctx)
	s.w.done(ctx, metrics.OpBoundaries, kindRead, err)
	return bs, err
}

func (s watchedStore) Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	r, err := s.Store.Append(ctx, boundary, events, cond)
	s.w.done(ctx, metrics.OpAppend, kindAppend, err)
	return r, err
}

func (s watchedStore) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	epoch, evs, err := s.Store.Read(ctx, boundary, after, limit, q)
	s.w.done(ctx, metrics.OpRead, kindRead, err)
	return epoch, evs, err
}

func (s watchedStore) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (string, []event.Event, error) {
	epoch, evs, err := s.Store.ReadBackward(ctx, boundary, before, limit, q)
	s.w.done(ctx, metrics.OpRead, kindRead, err)
	return epoch, evs, err
}

func (s watchedStore) Latest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error) {
	l, err := s.Store.Latest(ctx, boundary, q)
	s.w.done(ctx, metrics.OpLatest, kindRead, err)
	return l, err
}

func (s watchedStore) Heads(ctx context.Context) ([]backend.Head, error) {
	h, err := s.Store.Heads(ctx)
	s.w.done(ctx, metrics.OpHeads, kindRead, err)
	return h, err
}

func (s watchedStore) Checkpoint(ctx context.Context, boundary string) (uint64, error) {
	cp, err := s.Store.Checkpoint(ctx, boundary)
	s.w.done(ctx, metrics.OpCheckpoint, kindRead, err)
	return cp, err
}

func (s watchedStore) SaveCheckpoint(ctx context.Context, boundary string, l backend.Lease, position uint64) error {
	err := s.Store.SaveCheckpoint(ctx, boundary, l, position)
	s.w.done(ctx, metrics.OpSaveCheckpoint, kindCheckpoint, err)
	return err
}

func (s watchedStore) AcquireLease(ctx context.Context, boundary, holder string, gone []string, ttl time.Duration) (backend.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, boundary, holder, gone, ttl)
	s.w.done(ctx, metrics.OpAcquireLease, kindLease, err)
	return l, err
}

func (s watchedStore) RenewLease(ctx context.Context, l backend.Lease, ttl time.Duration) (backend.Lease, error) {
	nl, err := s.Store.RenewLease(ctx, l, ttl)
	s.w.done(ctx, metrics.OpRenewLease, kindLease, err)
	return nl, err
}

func (s watchedStore) ReleaseLease(ctx context.Context, l backend.Lease) error {
	err := s.Store.ReleaseLease(ctx, l)
	s.w.done(ctx, metrics.OpReleaseLease, kindLease, err)
	return err
}

func (s watchedStore) LeaseHolder(ctx context.Context, boundary string) (backend.Lease, error) {
	l, err := s.Store.LeaseHolder(ctx, boundary)
	s.w.done(ctx, metrics.OpLeaseHolder, kindRead, err)
	return l, err
}
