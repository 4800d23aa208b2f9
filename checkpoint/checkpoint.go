// Package checkpoint makes effectively-once processing of a boundary's
// events the easy path (docs/design.md §7, last paragraph): a consumer's own writes
// and its checkpoint, the pair (epoch, position), are saved in one database
// transaction, and the consumer resumes from the saved pair.
// It is part of orisun's stable public API (see package orisun).
//
//	cp, err := checkpoint.NewPG(pool, "order-totals", "default")
//	if err := cp.EnsureSchema(ctx); err != nil { … }
//	err = cp.Run(ctx, node, func(ctx context.Context, tx pgx.Tx, e event.Event) error {
//		_, err := tx.Exec(ctx, `UPDATE totals SET n = n + 1 WHERE type = $1`, e.Type)
//		return err
//	})
//
// The state machine of one event, in one transaction:
//
//	lock the consumer's row (created at position 0 when missing);
//	position ≤ saved:    already applied (the process died between commit
//	                     and the subscription's acknowledgement, or a second
//	                     instance got there first): roll back, skip;
//	position > saved+1:  a gap: the subscription did not start at the
//	                     checkpoint; error, nothing written;
//	another epoch:       the boundary was reset or restored: EpochError,
//	                     nothing written;
//	position = saved+1:  run the user's function, save (epoch, position),
//	                     commit. An error of the function rolls everything
//	                     back and ends the subscription.
//
// Because the position check and the write happen under the row lock in the
// same transaction as the user's writes, a consumer killed at any point
// (SIGKILL included) and restarted applies every event exactly once; two
// instances of one consumer running at once do not double-apply either.
//
// The table orisun_consumer_checkpoints (consumer primary key, boundary,
// epoch, position, updated_at) lives in the consumer's own database, next to
// its state; EnsureSchema creates it. PostgreSQL (pgx/v5, NewPG) and SQLite
// (database/sql with modernc.org/sqlite, NewSQLite) are supported.
//
// The price is one transaction per event (on PostgreSQL six round trips:
// begin, create-if-missing, lock, the user's writes, save, commit).
// Committing every N events is not offered yet.
package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// Table is the checkpoint table's name.
const Table = "orisun_consumer_checkpoints"

// Subscriber is where events come from: *orisun.Node (in-process) or a
// NATS client with the same Subscribe. The subscription must deliver the
// positions after after, in order, and end with event.ErrEpochChanged when
// opts.Epoch is not the boundary's epoch.
type Subscriber interface {
	Subscribe(ctx context.Context, boundary string, after uint64, h event.Handler, opts event.SubscribeOptions) error
}

// State is a consumer's saved checkpoint. An empty Epoch with Position 0
// means nothing was applied yet.
type State struct {
	Epoch    string
	Position uint64
}

// ErrOutOfOrder: an event arrived that does not follow the checkpoint (a
// gap). The subscription was not started after the saved position.
var ErrOutOfOrder = errors.New("event does not follow the checkpoint")

// EpochError says that the boundary's epoch is not the one the consumer's
// checkpoint belongs to: the boundary was reset or restored, and positions
// no longer mean what they meant when the consumer applied them. errors.Is
// matches event.ErrEpochChanged.
type EpochError struct {
	Consumer, Boundary string
	// Saved is the checkpoint's epoch, Got the boundary's (empty when the
	// subscription reported the change without naming it).
	Saved, Got string
	Position   uint64 // the checkpoint's position
}

func (e *EpochError) Error() string {
	got := e.Got
	if got == "" {
		got = "another epoch"
	}
	return fmt.Sprintf("consumer %q: boundary %q is now in %s, but the checkpoint (position %d) is of epoch %s: "+
		"the boundary was reset or restored, and its positions no longer mean what they meant when they were applied. "+
		"Rebuild the consumer's state from scratch and reset its checkpoint (Reset), then run it again",
		e.Consumer, e.Boundary, got, e.Position, e.Saved)
}

// Is makes errors.Is(err, event.ErrEpochChanged) true.
func (e *EpochError) Is(target error) bool { return target == event.ErrEpochChanged }

// Consumer is one named consumer's checkpoint in a database whose
// transactions are of type Tx (pgx.Tx or *sql.Tx).
type Consumer[Tx any] struct {
	name, boundary string
	db             dialect[Tx]
}

// row is a checkpoint row.
type row struct {
	boundary, epoch string
	position        uint64
}

// scanRow reads a row from the columns boundary, epoch and position, of a
// pgx.Row or a *sql.Row: the statements of both dialects select them so.
func scanRow(sc interface{ Scan(dest ...any) error }) (row, error) {
	var r row
	var pos int64
	if err := sc.Scan(&r.boundary, &r.epoch, &pos); err != nil {
		return row{}, err
	}
	r.position = uint64(pos)
	return r, nil
}

// dialect is one database's SQL.
type dialect[Tx any] interface {
	ensureSchema(ctx context.Context) error
	load(ctx context.Context, consumer string) (row, bool, error)
	reset(ctx context.Context, consumer string) error
	begin(ctx context.Context) (Tx, txn, error)
}

// txn is one open transaction.
type txn interface {
	// lock creates the consumer's row at position 0 when missing and
	// locks it until the end of the transaction.
	lock(ctx context.Context, consumer, boundary string) (row, error)
	save(ctx context.Context, consumer, epoch string, position uint64) error
	// reset deletes the consumer's checkpoint in this transaction.
	reset(ctx context.Context, consumer string) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

func newConsumer[Tx any](name, boundary string, db dialect[Tx]) (*Consumer[Tx], error) {
	if name == "" || len(name) > 200 {
		return nil, fmt.Errorf("%w: checkpoint: consumer name %q must have 1–200 bytes", event.ErrInvalid, name)
	}
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return nil, fmt.Errorf("checkpoint: consumer %q: %w", name, err)
	}
	return &Consumer[Tx]{name: name, boundary: boundary, db: db}, nil
}

// Name is the consumer's name; Boundary the boundary it consumes.
func (c *Consumer[Tx]) Name() string     { return c.name }
func (c *Consumer[Tx]) Boundary() string { return c.boundary }

// EnsureSchema creates the checkpoint table when it does not exist. Safe
// to call from several processes at once.
func (c *Consumer[Tx]) EnsureSchema(ctx context.Context) error {
	if err := c.db.ensureSchema(ctx); err != nil {
		return fmt.Errorf("checkpoint: create table %s: %w", Table, err)
	}
	return nil
}

// Load returns the saved checkpoint: subscribe after State.Position with
// event.SubscribeOptions{Epoch: State.Epoch}.
func (c *Consumer[Tx]) Load(ctx context.Context) (State, error) {
	r, ok, err := c.db.load(ctx, c.name)
	if err != nil {
		return State{}, fmt.Errorf("checkpoint: load consumer %q: %w", c.name, err)
	}
	if !ok {
		return State{}, nil
	}
	if err := c.sameBoundary(r); err != nil {
		return State{}, err
	}
	return State{Epoch: r.epoch, Position: r.position}, nil
}

// Reset deletes the consumer's checkpoint: the next run starts from
// position 0 in the boundary's current epoch. Rebuild (empty) the
// consumer's own state in the same step, or it is applied twice.
func (c *Consumer[Tx]) Reset(ctx context.Context) error {
	if err := c.db.reset(ctx, c.name); err != nil {
		return fmt.Errorf("checkpoint: reset consumer %q: %w", c.name, err)
	}
	return nil
}

// Rebuild empties the consumer's state with fn and deletes its checkpoint,
// in one transaction: a crash between the two would otherwise leave an
// empty state with the old checkpoint (events never applied) or the old
// state with no checkpoint (events applied twice). The next run starts
// from position 0 in the boundary's current epoch.
func (c *Consumer[Tx]) Rebuild(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	tx, t, err := c.db.begin(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint: rebuild consumer %q: %w", c.name, err)
	}
	defer t.rollback(context.WithoutCancel(ctx))
	if err := fn(ctx, tx); err != nil {
		return fmt.Errorf("checkpoint: rebuild consumer %q: %w", c.name, err)
	}
	if err := t.reset(ctx, c.name); err != nil {
		return fmt.Errorf("checkpoint: rebuild consumer %q: %w", c.name, err)
	}
	if err := t.commit(ctx); err != nil {
		return fmt.Errorf("checkpoint: rebuild consumer %q: %w", c.name, err)
	}
	return nil
}

func (c *Consumer[Tx]) sameBoundary(r row) error {
	if r.boundary != c.boundary {
		return fmt.Errorf("%w: checkpoint: consumer %q is saved for boundary %q, not %q: consumer names are unique per database",
			event.ErrConflict, c.name, r.boundary, c.boundary)
	}
	return nil
}

// Handler returns a subscription handler that applies each event with fn
// and saves the checkpoint in the same transaction (see the package
// comment for what it does with repeated, missing and foreign positions).
// fn must do all its writes through tx, and nothing that cannot be rolled
// back.
func (c *Consumer[Tx]) Handler(fn func(ctx context.Context, tx Tx, e event.Event) error) event.Handler {
	return func(ctx context.Context, e event.Event) error {
		return c.apply(ctx, fn, e)
	}
}

func (c *Consumer[Tx]) apply(ctx context.Context, fn func(ctx context.Context, tx Tx, e event.Event) error, e event.Event) (err error) {
	if e.Boundary != "" && e.Boundary != c.boundary {
		return fmt.Errorf("%w: checkpoint: consumer %q of boundary %q got an event of boundary %q",
			event.ErrInvalid, c.name, c.boundary, e.Boundary)
	}
	utx, tx, err := c.db.begin(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint: consumer %q position %d: begin: %w", c.name, e.Position, err)
	}
	committed := false
	defer func() {
		if !committed {
			// The transaction may be broken already; its own error is
			// of no use next to the one returned.
			_ = tx.rollback(context.WithoutCancel(ctx))
		}
	}()
	saved, err := tx.lock(ctx, c.name, c.boundary)
	if err != nil {
		return fmt.Errorf("checkpoint: consumer %q position %d: lock checkpoint: %w", c.name, e.Position, err)
	}
	if err := c.sameBoundary(saved); err != nil {
		return err
	}
	if saved.epoch != "" && e.Epoch != saved.epoch {
		return &EpochError{Consumer: c.name, Boundary: c.boundary, Saved: saved.epoch, Got: "epoch " + e.Epoch, Position: saved.position}
	}
	switch {
	case e.Position <= saved.position:
		return nil // applied before: the rollback leaves everything as it is
	case e.Position != saved.position+1:
		return fmt.Errorf("%w: consumer %q: got position %d, the checkpoint is at %d: positions %d..%d were never applied; "+
			"subscribe after the position Load returns (or use Run)",
			ErrOutOfOrder, c.name, e.Position, saved.position, saved.position+1, e.Position-1)
	}
	if err := fn(ctx, utx, e); err != nil {
		return fmt.Errorf("consumer %q at position %d: %w", c.name, e.Position, err)
	}
	if err := tx.save(ctx, c.name, e.Epoch, e.Position); err != nil {
		return fmt.Errorf("checkpoint: consumer %q position %d: save: %w", c.name, e.Position, err)
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("checkpoint: consumer %q position %d: commit: %w", c.name, e.Position, err)
	}
	committed = true
	return nil
}

// Run loads the checkpoint and subscribes after it, applying each event
// with fn (see Handler). It returns when the subscription ends: ctx's
// error, fn's error, or an *EpochError when the boundary's epoch is not the
// checkpoint's.
func (c *Consumer[Tx]) Run(ctx context.Context, src Subscriber, fn func(ctx context.Context, tx Tx, e event.Event) error) error {
	st, err := c.Load(ctx)
	if err != nil {
		return err
	}
	err = src.Subscribe(ctx, c.boundary, st.Position, c.Handler(fn), event.SubscribeOptions{Epoch: st.Epoch})
	var ee *EpochError
	if errors.Is(err, event.ErrEpochChanged) && !errors.As(err, &ee) {
		// The subscription found the change before any event reached the
		// handler: say what it means for this consumer.
		return fmt.Errorf("%w (%v)", &EpochError{Consumer: c.name, Boundary: c.boundary, Saved: st.Epoch, Position: st.Position}, err)
	}
	return err
}
