package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// TxAppend appends events to boundary inside an application transaction
// (Transact), under cond when it is not nil.
type TxAppend func(boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error)

// Prepare checks an append's request and completes its events (ids), as
// the node does before every append (event.Prepare with its limits).
type Prepare func(boundary string, events []event.Input, cond *event.Condition) ([]event.Input, error)

// ErrTxTimeout is the cause of an application transaction that ran past
// its deadline: it was rolled back. errors.Is matches
// context.DeadlineExceeded too.
var ErrTxTimeout = fmt.Errorf("the transaction ran past its deadline and was rolled back: %w", context.DeadlineExceeded)

// lend asks the writer goroutine to stand aside for one application
// transaction: having received it, the writer waits until done is closed,
// so no group commit runs meanwhile and no append interleaves.
type lend struct {
	done chan struct{}
}

// Transact runs fn in one transaction of the store's single writer, with
// app appending events in that same transaction: the application's own
// statements (through tx, on tables of its own in this database) and its
// events commit together, or neither does. The writer waits for it (every
// other append queues), between two group commits, so positions stay dense
// and commit-ordered (I1); the boundaries that got events are notified
// (OnAppend) after the commit.
//
// fn runs in a goroutine of its own with a context that ends after
// timeout: a function that has not returned by then is rolled back and
// Transact returns an error wrapping ErrTxTimeout at once (a statement in
// flight is interrupted when it was given that context; one that was not
// runs on, and the rollback, and the writer, wait for it). fn's error, a
// panic of fn (recovered: the writer carries on) or a failed append (which
// app returns, and every later call of app too) rolls the transaction
// back. fn must not call Commit or Rollback, nor append through the store
// (Append would wait for the writer fn holds, until the deadline).
func (s *Store) Transact(ctx context.Context, timeout time.Duration, prepare Prepare,
	fn func(ctx context.Context, tx *sql.Tx, app TxAppend) error) error {
	const op = "application transaction"
	if timeout <= 0 {
		return fmt.Errorf("sqlite: %s: %w: timeout is %s; it must be positive", op, event.ErrInvalid, timeout)
	}
	if s.closed() {
		return errClosed(op)
	}
	l := &lend{done: make(chan struct{})}
	if err := toWriter(s, ctx, s.lends, l, func() string { return op + ": wait for the writer" }); err != nil {
		return err
	}
	defer close(l.done) // the writer goes on
	return s.transact(ctx, timeout, prepare, fn)
}

// transact is Transact once the writer stands aside.
func (s *Store) transact(ctx context.Context, timeout time.Duration, prepare Prepare,
	fn func(ctx context.Context, tx *sql.Tx, app TxAppend) error) error {
	const op = "application transaction"
	// The writer's connection, as soon as the lease and boundary writes
	// that share it let go (ctx bounds the wait). The transaction is begun
	// without ctx's end: database/sql rolls a transaction back on its
	// context's end by discarding the connection, the writer's only one.
	// The deadline reaches fn's statements through the context fn is
	// given, and the rollback below ends the rest.
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		return s.translate(op+": take the writer's connection", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return s.translate(op+": begin", err)
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTxTimeout)
	defer cancel()
	// Close ends the transaction as the deadline does: Close waits for
	// the writer, which waits for this.
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-runCtx.Done():
		}
	}()
	a := &txAppender{s: s, ctx: runCtx, prepare: prepare, tx: groupTx{tx: tx, stmts: s.stmts, dyn: s.dyn, use: &s.stmtUse}}
	res := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				res <- fmt.Errorf("sqlite: %s: the function panicked (%v); it was rolled back\n%s", op, p, debug.Stack())
			}
		}()
		res <- fn(runCtx, tx, a.append)
	}()
	var fnErr error
	select {
	case fnErr = <-res:
	case <-runCtx.Done():
	}
	touched, failed := a.end()
	if cerr := context.Cause(runCtx); cerr != nil {
		// Past the deadline (or the caller's context ended, or the store
		// closes): whatever fn did is rolled back, even if it returned
		// just now.
		_ = tx.Rollback()
		if errors.Is(cerr, ErrTxTimeout) {
			return fmt.Errorf("sqlite: %s: %w (after %s; it holds the single writer, and every append waits meanwhile)", op, cerr, timeout)
		}
		if s.closed() {
			return errClosed(op)
		}
		return fmt.Errorf("sqlite: %s: rolled back: %w", op, cerr)
	}
	switch {
	case fnErr != nil:
		_ = tx.Rollback()
		return fnErr
	case failed != nil:
		_ = tx.Rollback()
		return fmt.Errorf("sqlite: %s: rolled back: an append failed (the function went on without it): %w", op, failed)
	}
	if err := tx.Commit(); err != nil {
		return s.translate(op+": commit", err)
	}
	s.notify(touched)
	return nil
}

// txAppender appends inside one application transaction. Its calls are
// serialised; after end they fail.
type txAppender struct {
	s       *Store
	ctx     context.Context
	prepare Prepare
	tx      groupTx

	mu      sync.Mutex
	over    bool
	failed  error
	touched []string
}

func (a *txAppender) append(boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.over:
		return event.AppendResult{}, fmt.Errorf("sqlite: append to %q: %w: the application transaction is over", boundary, event.ErrClosed)
	case a.failed != nil:
		return event.AppendResult{}, fmt.Errorf("sqlite: append to %q: an earlier append of this transaction failed, and it rolls back: %w",
			boundary, a.failed)
	}
	prepared, err := a.prepare(boundary, events, cond)
	if err != nil {
		a.failed = err
		return event.AppendResult{}, err
	}
	res, wrote, err := a.s.appendOne(a.ctx, a.tx, sqlstore.NewRequest(a.ctx, boundary, prepared, cond), a.s.now().UTC())
	if err != nil {
		a.failed = err
		return event.AppendResult{}, err
	}
	if wrote && !slices.Contains(a.touched, boundary) {
		a.touched = append(a.touched, boundary)
	}
	return res, nil
}

// end stops further appends and returns the boundaries that got events
// and the first failure. An append in flight finishes first.
func (a *txAppender) end() (touched []string, failed error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.over = true
	return a.touched, a.failed
}
