package postgres

import (
	"context"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// sqlProbeWrite takes a transaction id, which makes the commit write (and
// flush) a WAL record, and reads whether the transaction may write.
const sqlProbeWrite = `SELECT current_setting('transaction_read_only'), txid_current()`

// ProbeWrite checks that the server takes a write now, without changing
// any table: one transaction that takes a transaction id and commits. A
// server that is down, refuses connections, is a standby (recovery) or
// read-only (default_transaction_read_only), or cannot write its WAL fails
// it (ErrUnavailable), as it fails appends. A full disk of the data files
// alone (the WAL elsewhere) is not seen here: appends that fail for it are
// seen by their own failures. The node runs it while store writes fail, to
// see them work again without waiting for an append (docs/operations.md,
// "When the store fails").
func (s *Store) ProbeWrite(ctx context.Context) error {
	const op = "probe write"
	if s.isClosed() {
		return errClosed(op)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.translate(op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var readOnly string
	var xid int64
	if err := tx.QueryRow(ctx, sqlProbeWrite).Scan(&readOnly, &xid); err != nil {
		return s.translate(op, err)
	}
	if readOnly == "on" {
		return fmt.Errorf("postgres: %s: %w: the server takes no writes (transaction_read_only is on)", op, event.ErrUnavailable)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.translate(op+": commit", err)
	}
	return nil
}
