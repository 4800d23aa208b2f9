package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// sqlProbeWrite takes a transaction id, which makes the commit write (and
// flush) a WAL record.
const sqlProbeWrite = `SELECT txid_current()`

// ProbeWrite checks that the server takes a write now, without changing
// any table: one READ WRITE transaction, as an append's, that takes a
// transaction id and commits. A server that is down, refuses connections,
// is a standby (in recovery) or cannot write its WAL fails it
// (ErrUnavailable), as it fails appends. A full disk of the data files
// alone (the WAL elsewhere) is not seen here: appends that fail for it are
// seen by their own failures. The node runs it while store writes fail, to
// see them work again without waiting for an append (docs/operations.md,
// "When the store fails").
func (s *Store) ProbeWrite(ctx context.Context) error {
	const op = "probe write"
	if s.isClosed() {
		return errClosed(op)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite})
	if err != nil {
		return s.translate(op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var xid int64
	if err := tx.QueryRow(ctx, sqlProbeWrite).Scan(&xid); err != nil {
		return s.translate(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.translate(op+": commit", err)
	}
	return nil
}
