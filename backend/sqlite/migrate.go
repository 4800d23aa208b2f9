package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/orisun-io/orisun/migrations"
)

// migrate applies the pending migrations on the writer connection, each
// version in its own transaction together with its schema_migrations row
// (the shape of river's rivermigrate). BEGIN IMMEDIATE holds the write lock
// from the version check to the commit, so two openers could never apply the
// same version twice, even without the directory lock.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.List(migrations.SQLite, migrations.SQLiteDir)
	if err != nil {
		return err
	}
	if _, err := s.wdb.ExecContext(ctx, sqlCreateMigrationsTable); err != nil {
		return translate("create schema_migrations", err)
	}
	var current int
	if err := s.wdb.QueryRowContext(ctx, sqlMaxMigration).Scan(&current); err != nil {
		return translate("read schema version", err)
	}
	if latest := ms[len(ms)-1].Version; current > latest {
		return fmt.Errorf("sqlite: the database schema is at version %d, newer than this orisun knows (%d); run a newer orisun",
			current, latest)
	}
	for _, m := range ms {
		applied, err := s.applyMigration(ctx, m)
		if err != nil {
			return err
		}
		if applied {
			s.log.Info("applied migration", "version", m.Version, "name", m.Name)
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, m migrations.Migration) (applied bool, err error) {
	op := fmt.Sprintf("migration %s", m.Name)
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return false, translate(op, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var n int
	if err := tx.QueryRowContext(ctx, sqlMigrationApplied, m.Version).Scan(&n); err != nil {
		return false, translate(op, err)
	}
	if n > 0 {
		return false, tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, translate(op, err)
	}
	if _, err := tx.ExecContext(ctx, sqlInsertMigrationRow, m.Version, s.now().UnixNano()); err != nil {
		return false, translate(op, err)
	}
	if err := tx.Commit(); err != nil {
		return false, translate(op, err)
	}
	return true, nil
}

// execer is what a statement needs: a transaction or a database.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
