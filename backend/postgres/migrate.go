package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/migrations"
)

// migrate applies the pending migrations, each version in its own
// transaction together with its orisun_schema_migrations row (the shape of
// river's rivermigrate). Every migration transaction first takes a
// transaction-scoped advisory lock and only then looks at the versions, so
// nodes that start at once apply each version exactly once: the others wait
// for the lock and then find the version applied. The lock is released by
// the transaction's end, whatever happens, so a crashed node never leaves it
// held.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.List(migrations.Postgres, migrations.PostgresDir)
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].Version
	var current int
	err = s.inMigrationTx(ctx, "read schema version", func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, sqlMaxMigration).Scan(&current)
	})
	if err != nil {
		return err
	}
	if current > latest {
		return fmt.Errorf("postgres: the database schema is at version %d, newer than this orisun knows (%d); run a newer orisun",
			current, latest)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		applied := false
		err := s.inMigrationTx(ctx, "migration "+m.Name, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, sqlMigrationApplied, m.Version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil // another node applied it while this one waited for the lock
			}
			// No arguments: pgx sends the file with the simple protocol,
			// which runs its several statements in this transaction.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlInsertMigrationRow, m.Version, m.Name); err != nil {
				return err
			}
			applied = true
			return nil
		})
		if err != nil {
			return err
		}
		if applied {
			s.log.Info("applied migration", "version", m.Version, "name", m.Name)
		}
	}
	return nil
}

// inMigrationTx runs fn in a transaction that holds the migrations' advisory
// lock and in which orisun_schema_migrations exists. Creating the table
// under the lock matters: two concurrent CREATE TABLE IF NOT EXISTS of one
// table can fail with a unique violation in the catalog.
func (s *Store) inMigrationTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return translate(op+": begin", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, sqlMigrationLock, migrationsLock); err != nil {
		return translate(op+": take the migrations lock", err)
	}
	if _, err := tx.Exec(ctx, sqlCreateMigrationsTable); err != nil {
		return translate(op+": create orisun_schema_migrations", err)
	}
	if err := fn(tx); err != nil {
		return translate(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return translate(op+": commit", err)
	}
	return nil
}

// sqlAppRoleGranted names this database's application role
// (orisun_app_role(), migration 0004) and says whether it exists and may
// call orisun_append and orisun_enqueue and use orisun's schema (the names
// quoted as identifiers where they need it).
const sqlAppRoleGranted = `SELECT quote_ident(r), quote_ident(current_schema()), CASE WHEN to_regrole(quote_ident(r)) IS NULL THEN false
    ELSE has_function_privilege(r, 'orisun_append(text, json, json)', 'EXECUTE')
        AND has_function_privilege(r, 'orisun_enqueue(text, json)', 'EXECUTE')
        AND has_schema_privilege(r, current_schema(), 'USAGE') END
FROM orisun_app_role() r`

// checkAppRole warns when the role the applications are granted
// (docs/outbox.md "Privileges"), this database's own, is missing or lacks
// its grants: the migrations create it only when orisun's role may create
// roles.
func (s *Store) checkAppRole(ctx context.Context) {
	var role, schema string
	var ok bool
	if err := s.pool.QueryRow(ctx, sqlAppRoleGranted).Scan(&role, &schema, &ok); err != nil {
		s.log.Warn("postgres: cannot check the application role (orisun_app_role())", "err", err)
		return
	}
	if !ok {
		r := role
		s.log.Warn(fmt.Sprintf("postgres: the role %s does not exist or may not execute orisun_append and orisun_enqueue "+
			"(orisun's role may not create roles): applications cannot append in their own transactions until an "+
			"administrator runs CREATE ROLE %s NOLOGIN and orisun's role runs GRANT EXECUTE ON FUNCTION "+
			"orisun_append(text, json, json), orisun_append(text, text, text), orisun_append(text, jsonb, jsonb), "+
			"orisun_enqueue(text, json), orisun_enqueue(text, text), orisun_enqueue(text, jsonb) TO %s "+
			"and GRANT USAGE ON SCHEMA %s TO %s (docs/outbox.md \"Privileges\")",
			r, r, r, schema, r), "role", role)
	}
}

// requireUTF8 refuses a database whose server encoding is not UTF8, before
// any migration runs. Events are UTF-8 (JSON data and metadata, types,
// tags), and the schema itself holds characters only UTF8 can store: on
// LATIN1 the fourth migration failed halfway through the schema (three
// applied), on SQL_ASCII too (PostgreSQL converts nothing between UTF8 and
// SQL_ASCII). The encoding of a database cannot be changed; the error says
// how to create one that works.
func (s *Store) requireUTF8(ctx context.Context) error {
	var db, enc string
	if err := s.pool.QueryRow(ctx, `SELECT current_database(), current_setting('server_encoding')`).Scan(&db, &enc); err != nil {
		return translate("read the database's encoding", err)
	}
	if enc != "UTF8" {
		return fmt.Errorf("%w: postgres: database %s has server_encoding %s; orisun needs a UTF8 database "+
			"(create one with CREATE DATABASE ... ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8' TEMPLATE template0, "+
			"or another UTF-8 locale); this start wrote nothing to it",
			event.ErrInvalid, pgx.Identifier{db}.Sanitize(), enc)
	}
	return nil
}
