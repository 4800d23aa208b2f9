package postgres

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgretry"
)

// translate turns a database error into an error of the core: a sentinel of
// package event, wrapped with op (the shape of river's riverpgxv5
// interpretError). The driver's error survives only as text, a
// backend.StoreDetail, so no caller can depend on pgx types (the store
// seam, package backend) and no client is told the database's words.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if sqlstore.IsDomain(err) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if sentinel := sentinelOf(pgErr.Code); sentinel != nil {
			return fmt.Errorf("postgres: %s: %w: %w", op, sentinel, &backend.StoreDetail{Text: describe(pgErr)})
		}
		// A bug, a missing migration, a corrupted database: internal, not
		// retryable.
		return fmt.Errorf("postgres: %s: %s", op, describe(pgErr))
	}
	if unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, event.ErrUnavailable, &backend.StoreDetail{Text: err.Error()})
	}
	return fmt.Errorf("postgres: %s: %v", op, err)
}

// sentinelOf maps a SQLSTATE to a sentinel of the core; nil means an
// internal error.
func sentinelOf(code string) error {
	if pgretry.Retryable(code) {
		// Nothing was written, and the same request may succeed now: an
		// append retried with the same ids returns the stored positions
		// if it did commit after all.
		return event.ErrUnavailable
	}
	if len(code) != 5 {
		return nil
	}
	switch code[:2] {
	case "23": // integrity constraint violation
		return event.ErrConflict
	case "22": // data exception: a value the database refuses (e.g. a JSON text it cannot store)
		return event.ErrInvalid
	case "54": // program limit exceeded
		return event.ErrTooLarge
	}
	return nil
}

// describe is the text of a server error: its code and message, and the
// constraint when there is one (the detail may quote a row's values; the
// message and the constraint say enough).
func describe(e *pgconn.PgError) string {
	s := fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.Code)
	if e.ConstraintName != "" {
		s += " on " + e.ConstraintName
	}
	if e.Code == "08P01" && strings.HasPrefix(e.Message, "unsupported startup parameter") {
		// PostgreSQL accepts every parameter orisun sets at connect;
		// PgBouncer, by default, refuses two of them (plan_cache_mode,
		// idle_in_transaction_session_timeout).
		s += ": PostgreSQL accepts this parameter, so a connection pooler such as PgBouncer is in between; " +
			"connect orisun to PostgreSQL directly, or see docs/deployment.md, \"Behind PgBouncer\""
	}
	return s
}

// unreachable reports whether err says that the database could not be
// reached or the connection broke: a retry may succeed.
func unreachable(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr),
		errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		pgconn.Timeout(err),
		pgconn.SafeToRetry(err):
		return true
	}
	// pgconn reports a connection it closed after a failed read or write as
	// plain text in a few places.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}
