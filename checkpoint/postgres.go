package checkpoint

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// PGBeginner starts PostgreSQL transactions: *pgxpool.Pool or *pgx.Conn.
type PGBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// NewPG returns the checkpoint of consumer name on boundary, kept in
// PostgreSQL next to the consumer's own tables. Handler functions get the
// pgx.Tx the checkpoint is saved in.
func NewPG(db PGBeginner, name, boundary string) (*Consumer[pgx.Tx], error) {
	return newConsumer[pgx.Tx](name, boundary, pgDialect{db})
}

// The SQL of PostgreSQL. The advisory lock serialises concurrent
// EnsureSchema calls: CREATE TABLE IF NOT EXISTS alone can fail on the
// catalog's unique index when two sessions run it at once.
const (
	pgSchema = `
SELECT pg_advisory_xact_lock(hashtext('orisun_consumer_checkpoints'));
CREATE TABLE IF NOT EXISTS orisun_consumer_checkpoints (
	consumer   text PRIMARY KEY,
	boundary   text NOT NULL,
	epoch      text NOT NULL,
	position   bigint NOT NULL CHECK (position >= 0),
	updated_at timestamptz NOT NULL DEFAULT now()
);`
	pgLoad   = `SELECT boundary, epoch, position FROM orisun_consumer_checkpoints WHERE consumer = $1`
	pgReset  = `DELETE FROM orisun_consumer_checkpoints WHERE consumer = $1`
	pgCreate = `INSERT INTO orisun_consumer_checkpoints (consumer, boundary, epoch, position) VALUES ($1, $2, '', 0)
ON CONFLICT (consumer) DO NOTHING`
	pgLock = `SELECT boundary, epoch, position FROM orisun_consumer_checkpoints WHERE consumer = $1 FOR UPDATE`
	pgSave = `UPDATE orisun_consumer_checkpoints SET epoch = $2, position = $3, updated_at = now() WHERE consumer = $1`
)

type pgDialect struct{ db PGBeginner }

func (d pgDialect) ensureSchema(ctx context.Context) error {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, pgSchema); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (d pgDialect) load(ctx context.Context, consumer string) (row, bool, error) {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return row{}, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	r, err := scanRow(tx.QueryRow(ctx, pgLoad, consumer))
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	return r, true, nil
}

func (d pgDialect) reset(ctx context.Context, consumer string) error {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, pgReset, consumer); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (d pgDialect) begin(ctx context.Context) (pgx.Tx, txn, error) {
	tx, err := d.db.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tx, pgTxn{tx}, nil
}

type pgTxn struct{ tx pgx.Tx }

func (t pgTxn) lock(ctx context.Context, consumer, boundary string) (row, error) {
	if _, err := t.tx.Exec(ctx, pgCreate, consumer, boundary); err != nil {
		return row{}, err
	}
	return scanRow(t.tx.QueryRow(ctx, pgLock, consumer))
}

func (t pgTxn) save(ctx context.Context, consumer, epoch string, position uint64) error {
	_, err := t.tx.Exec(ctx, pgSave, consumer, epoch, int64(position))
	return err
}

func (t pgTxn) reset(ctx context.Context, consumer string) error {
	_, err := t.tx.Exec(ctx, pgReset, consumer)
	return err
}
func (t pgTxn) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgTxn) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
