package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// sqlProbeWrite is the write probe: the scratch table of migration 0003
// emptied into a new file, a row inserted into it (a new page on the data
// disk) and deleted. One statement text without arguments: pgx sends it
// with the simple protocol, one round trip, inside the probe's
// transaction.
const sqlProbeWrite = `TRUNCATE orisun_write_probe;
INSERT INTO orisun_write_probe (at) VALUES (clock_timestamp());
DELETE FROM orisun_write_probe`

// ProbeWrite checks that the server takes a write now, without changing
// anything a reader sees: one READ WRITE transaction, as an append's, that
// empties orisun's scratch table (orisun_write_probe, migration 0003) into
// a new file, inserts a row, which takes a new page of the data disk,
// deletes it and commits, writing WAL. A server that is down, refuses
// connections, is a standby (in recovery), cannot write its WAL or cannot
// extend a table on its data disk (full, with the WAL elsewhere) fails it
// (ErrUnavailable), as it fails appends. The node runs it while store
// writes fail, to see them work again without waiting for an append
// (docs/operations.md, "When the store fails"). Probes of several nodes
// at once wait for each other on the table's lock, for a few milliseconds.
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
	if _, err := tx.Exec(ctx, sqlProbeWrite); err != nil {
		return s.translate(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.translate(op+": commit", err)
	}
	return nil
}
