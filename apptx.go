package orisun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
)

// AppendFunc appends events to boundary in the transaction of
// Node.AppendTx, under cond when it is not nil, with the checks,
// idempotency and condition of Node.Append. Its events get their positions
// in that transaction and exist if and only if it commits. An append that
// fails rolls the whole transaction back, whatever the function returns
// (as an error of orisun_append aborts a PostgreSQL transaction).
type AppendFunc func(boundary string, events []Input, cond *Condition) (AppendResult, error)

// AppendTx runs fn in one transaction of the node's SQLite database, the
// transaction in which append writes events too: the embedding program's
// own rows (tables of its own in orisun's database file, through tx) and
// its events commit together when fn returns nil, or neither is written
// (docs/outbox.md, "Embedded SQLite"). After the commit the publishers
// relay the events as every append's.
//
// fn holds orisun's single writer: every other append of the node waits
// until it returns, and so do lease changes and boundary creation. It is
// bounded by Config.AppendTxTimeout (ORISUN_APPEND_TX_TIMEOUT: 2s, or a
// quarter of the lease TTL when that is shorter) and by ctx: a function that runs longer is rolled back and
// AppendTx returns an error matching context.DeadlineExceeded without
// waiting for it (give ctx to every statement, so that the deadline
// interrupts it). Rolled back too: fn's error (returned as it is), a
// panic of fn (recovered, returned as an error, the node carries on) and a
// failed append. fn must not commit or roll back tx, and must not call
// the node's Append, AppendTx or CreateBoundary: they wait for the writer
// fn holds, until the deadline rolls the transaction back. A panic in a
// goroutine that fn starts is not fn's and cannot be recovered: it ends
// the program, as any unrecovered panic does. The timeout must be below
// half of Config.LeaseTTL (New refuses it otherwise): the lease renewals
// need the connection the transaction holds.
// Stopping the node rolls it back at once (event.ErrClosed).
//
// AppendTx needs the SQLite backend; on PostgreSQL, the application's
// transaction calls orisun_append itself (package outbox).
func (n *Node) AppendTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx, appendEvents AppendFunc) error) error {
	var runCtx context.Context
	if !n.life.IfRunning(func() { runCtx = n.runCtx }) {
		return fmt.Errorf("orisun: node not running: %w", event.ErrClosed)
	}
	if _, _, err := n.ready(); err != nil {
		return err
	}
	s, ok := n.rawStore.(*sqlite.Store)
	if !ok {
		return fmt.Errorf("%w: AppendTx needs the SQLite backend (ORISUN_BACKEND is %s): on PostgreSQL, append in the "+
			"application's own transaction with orisun_append (package outbox, docs/outbox.md)", event.ErrInvalid, n.cfg.Backend)
	}
	prepare := func(boundary string, events []event.Input, cond *event.Condition) ([]event.Input, error) {
		prepared, err := event.Prepare(boundary, events, n.limits)
		if err != nil {
			return nil, fmt.Errorf("append to %q: %w", boundary, err)
		}
		if cond != nil {
			if err := event.ValidateQuery(&cond.Query); err != nil {
				return nil, fmt.Errorf("append to %q: condition: %w", boundary, err)
			}
		}
		return prepared, nil
	}
	// Stop ends the transaction at once: it holds the writer that the
	// release of the leases, later in Stop, needs.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()
	calls := &txAppends{}
	err := s.Transact(ctx, n.cfg.AppendTxTimeout, prepare, func(ctx context.Context, tx *sql.Tx, app sqlite.TxAppend) error {
		return fn(ctx, tx, calls.wrap(app))
	})
	if err != nil && runCtx.Err() != nil && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("orisun: the node stops: %w: the application transaction was rolled back", event.ErrClosed)
	}
	n.countTxAppends(calls.done(), err)
	return err
}

// txAppend is one append of an AppendTx transaction, for the metrics.
type txAppend struct {
	boundary string
	events   int
	err      error
	took     time.Duration
}

// txAppends records the appends of one AppendTx transaction. After done,
// calls of a function that overran its deadline are not recorded (they
// fail: the transaction is over).
type txAppends struct {
	mu    sync.Mutex
	calls []txAppend
	over  bool
}

func (c *txAppends) wrap(app sqlite.TxAppend) AppendFunc {
	return func(boundary string, events []Input, cond *Condition) (AppendResult, error) {
		start := time.Now()
		res, err := app(boundary, events, cond)
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.over {
			c.calls = append(c.calls, txAppend{boundary, len(events), err, time.Since(start)})
		}
		return res, err
	}
}

func (c *txAppends) done() []txAppend {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	return c.calls
}

// countTxAppends counts the appends of an AppendTx transaction in the
// node's append metrics (orisun_append_requests_total and the others, as
// Node.Append's) once it has ended (txErr: nil when it committed): a
// refused append by its own error; an append that succeeded by the
// transaction's outcome: ok when it committed, and when it was rolled
// back by the deadline or the node's stop, by that error (unavailable).
// The appends of a transaction the function itself ended (its error or a
// panic) are not counted: they were neither appended nor refused.
func (n *Node) countTxAppends(calls []txAppend, txErr error) {
	if n.metrics == nil {
		return
	}
	for _, c := range calls {
		err := c.err
		if err == nil && txErr != nil {
			if api.CodeOf(txErr) == api.CodeInternal {
				continue
			}
			err = txErr
		}
		n.metrics.Boundary(c.boundary).Appended(c.events, err, c.took)
	}
}
