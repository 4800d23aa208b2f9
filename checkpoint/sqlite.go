package checkpoint

import (
	"context"
	"database/sql"
	"errors"
)

// NewSQLite returns the checkpoint of consumer name on boundary, kept in a
// SQLite database (database/sql, e.g. modernc.org/sqlite) next to the
// consumer's own tables. Handler functions get the *sql.Tx the checkpoint
// is saved in.
//
// Open the database with a busy timeout (modernc: "?_pragma=busy_timeout(5000)")
// when other connections write to it too. Each transaction writes first
// (it creates the checkpoint row if missing), so it takes SQLite's write
// lock at its first statement and never fails upgrading a read lock.
func NewSQLite(db *sql.DB, name, boundary string) (*Consumer[*sql.Tx], error) {
	return newConsumer[*sql.Tx](name, boundary, sqliteDialect{db})
}

const (
	sqliteSchema = `CREATE TABLE IF NOT EXISTS orisun_consumer_checkpoints (
	consumer   TEXT PRIMARY KEY,
	boundary   TEXT NOT NULL,
	epoch      TEXT NOT NULL,
	position   INTEGER NOT NULL CHECK (position >= 0),
	updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`
	sqliteLoad   = `SELECT boundary, epoch, position FROM orisun_consumer_checkpoints WHERE consumer = ?`
	sqliteReset  = `DELETE FROM orisun_consumer_checkpoints WHERE consumer = ?`
	sqliteCreate = `INSERT INTO orisun_consumer_checkpoints (consumer, boundary, epoch, position) VALUES (?, ?, '', 0)
ON CONFLICT (consumer) DO NOTHING`
	sqliteSave = `UPDATE orisun_consumer_checkpoints SET epoch = ?, position = ?,
	updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE consumer = ?`
)

type sqliteDialect struct{ db *sql.DB }

func (d sqliteDialect) ensureSchema(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, sqliteSchema)
	return err
}

func (d sqliteDialect) load(ctx context.Context, consumer string) (row, bool, error) {
	r, err := scanRow(d.db.QueryRowContext(ctx, sqliteLoad, consumer))
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	return r, true, nil
}

func (d sqliteDialect) reset(ctx context.Context, consumer string) error {
	_, err := d.db.ExecContext(ctx, sqliteReset, consumer)
	return err
}

func (d sqliteDialect) begin(ctx context.Context) (*sql.Tx, txn, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return tx, sqliteTxn{tx}, nil
}

type sqliteTxn struct{ tx *sql.Tx }

func (t sqliteTxn) lock(ctx context.Context, consumer, boundary string) (row, error) {
	// The write comes first: it takes the database's write lock, which
	// SQLite holds until the commit (SQLite has no row locks).
	if _, err := t.tx.ExecContext(ctx, sqliteCreate, consumer, boundary); err != nil {
		return row{}, err
	}
	return scanRow(t.tx.QueryRowContext(ctx, sqliteLoad, consumer))
}

func (t sqliteTxn) save(ctx context.Context, consumer, epoch string, position uint64) error {
	_, err := t.tx.ExecContext(ctx, sqliteSave, epoch, int64(position), consumer)
	return err
}

func (t sqliteTxn) reset(ctx context.Context, consumer string) error {
	_, err := t.tx.ExecContext(ctx, sqliteReset, consumer)
	return err
}
func (t sqliteTxn) commit(context.Context) error   { return t.tx.Commit() }
func (t sqliteTxn) rollback(context.Context) error { return t.tx.Rollback() }
