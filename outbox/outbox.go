// Package outbox appends events to orisun's log from the application's own
// PostgreSQL transaction (docs/outbox.md): the application's rows and the
// events commit together, or neither does. It calls the SQL functions that
// orisun's migrations install (orisun_append, orisun_enqueue) in the
// transaction it is given, and returns what package client returns for the
// same request: an event.AppendResult, and errors that are *api.Error with
// the API's codes, so errors.Is matches event.ErrInvalid, ErrTooLarge,
// ErrNotFound, ErrConflict and ErrUnavailable, and a failed condition
// carries an *event.ConflictError with its position.
// It is part of orisun's stable public API (see package orisun).
//
//	tx, err := pool.Begin(ctx)
//	…
//	_, err = tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES ($1, $2)`, 42, "c-7")
//	res, err := outbox.Append(ctx, tx, "orders", []event.Input{{Type: "order.placed", Data: data}}, cond)
//	if errors.Is(err, event.ErrConflict) { … } // the transaction is aborted: roll it back
//	err = tx.Commit(ctx)
//
// Append and Enqueue take a pgx.Tx (github.com/jackc/pgx/v5); AppendSQL and
// EnqueueSQL a *sql.Tx of database/sql with a PostgreSQL driver that takes
// $n placeholders (pgx's stdlib, lib/pq).
//
// The functions are called by their unqualified names: when orisun lives in
// a schema of its own, that schema must be on the connection's search_path
// (docs/outbox.md "Privileges"). The connection's role must be a member of
// the application role of orisun's database (orisun_app_<database>).
//
// An error of the function aborts the transaction, as every error does in
// PostgreSQL: roll it back (nothing of it is written), or call the helper
// inside a SAVEPOINT to go on after a refusal. Append holds the boundary's
// head row until the transaction ends, and every other append of the
// boundary waits for it: call it last, just before the commit. Enqueue
// holds nothing; the lease holder moves the staged events into the log
// after the commit, in the order it finds them.
//
// The package compiles none of orisun's store, relay or embedded server
// into the application: only packages event and api, the small
// internal encoder package client uses too (internal/eventjson), the list
// of retryable SQLSTATEs the store shares (internal/pgretry), and the
// drivers.
package outbox

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/eventjson"
	"github.com/orisun-io/orisun/internal/pgretry"
)

// The statements: the functions of migrations 0004 and 0005.
const (
	sqlAppend  = `SELECT epoch::text, first_position, last_position FROM orisun_append($1, $2::json, $3::json)`
	sqlEnqueue = `SELECT orisun_enqueue($1, $2::json)`
)

// codes maps the SQLSTATEs of class OR (docs/outbox.md, "Errors") to the
// API's error codes.
var codes = map[string]string{
	"ORINV": api.CodeInvalid,
	"ORBIG": api.CodeTooLarge,
	"ORNFD": api.CodeNotFound,
	"ORCFL": api.CodeConflict,
	"ORUNV": api.CodeUnavailable,
}

// encode returns the arguments of the functions: the events as the JSON
// array of the API's request, and the condition as JSON or nil (SQL NULL),
// written as package client writes them (internal/eventjson): data and
// metadata as given when compact, nothing HTML-escaped, so an event sent
// through either is stored as the same bytes. Data or metadata that is not
// JSON is refused here, naming the event and the field, as the client does.
func encode(op string, events []event.Input, cond *event.Condition) (evs string, c any, err error) {
	if len(events) == 0 {
		// null would be "a JSON null cannot be a list of events"; the
		// API's words for an empty append are those of [].
		events = []event.Input{}
	}
	b, err := eventjson.AppendEvents(make([]byte, 0, eventjson.Size(events)), events)
	if err != nil {
		// err wraps event.ErrInvalid and names the event and the field.
		return "", nil, fmt.Errorf("%s: %w", op, err)
	}
	if cond == nil {
		return string(b), nil, nil
	}
	cb, err := eventjson.AppendJSON(nil, cond)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %s: encode the condition: %v", event.ErrInvalid, op, err)
	}
	return string(b), string(cb), nil
}

// sqlState is what the PostgreSQL drivers' errors tell: pgconn's
// *PgError (pgx, and database/sql through pgx's stdlib) has the fields;
// another driver's error may have a SQLState method.
func sqlState(err error) (code, message string, ok bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.Message, true
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		msg := st.(error).Error()
		// lib/pq and others prefix the severity: keep the message.
		msg = strings.TrimPrefix(strings.TrimPrefix(msg, "pq: "), "ERROR: ")
		return st.SQLState(), msg, true
	}
	return "", "", false
}

// conflictAt reads the position out of the message of a failed condition
// ("… an event matching the query exists at position N (after A)").
var conflictAt = regexp.MustCompile(`condition failed: an event matching the query exists at position (\d+) `)

// translate turns the error of a call into the client's: an *api.Error for
// the errors of class OR (the message is the function's, which names the
// event, the field and the limit); for the errors worth retrying that the
// store reports as unavailable (a serialization failure, a deadlock, a
// lock timeout, a lost connection, …: internal/pgretry) an *api.Error with
// the code unavailable wrapped together with the driver's error, so that
// errors.Is(err, event.ErrUnavailable) and errors.As to the driver's error
// type both hold; the driver's error wrapped otherwise.
func translate(op, boundary string, cond *event.Condition, err error) error {
	state, msg, ok := sqlState(err)
	if ok && pgretry.Retryable(state) {
		return fmt.Errorf("outbox: %s: %w: %w", op, &api.Error{Code: api.CodeUnavailable, Message: msg}, err)
	}
	code, isOR := codes[state]
	if !ok || !isOR {
		return fmt.Errorf("outbox: %s: %w", op, err)
	}
	e := &api.Error{Code: code, Message: msg}
	if m := conflictAt.FindStringSubmatch(msg); m != nil && code == api.CodeConflict && cond != nil {
		if pos, err := strconv.ParseUint(m[1], 10, 64); err == nil {
			e.Conflict = &event.ConflictError{Boundary: boundary, After: cond.After, Position: pos}
		}
	}
	return e
}

// scanner is a row of either driver; queryRow runs a statement in the
// caller's transaction.
type (
	scanner  interface{ Scan(dest ...any) error }
	queryRow func(sql string, args ...any) scanner
)

// appendVia calls orisun_append through q.
func appendVia(q queryRow, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	op := fmt.Sprintf("orisun_append to %q", boundary)
	evs, c, err := encode(op, events, cond)
	if err != nil {
		return event.AppendResult{}, err
	}
	var epoch string
	var first, last int64
	if err := q(sqlAppend, boundary, evs, c).Scan(&epoch, &first, &last); err != nil {
		return event.AppendResult{}, translate(op, boundary, cond, err)
	}
	return event.AppendResult{Epoch: epoch, First: uint64(first), Last: uint64(last)}, nil
}

// enqueueVia calls orisun_enqueue through q.
func enqueueVia(q queryRow, boundary string, events []event.Input) (int, error) {
	op := fmt.Sprintf("orisun_enqueue to %q", boundary)
	evs, _, err := encode(op, events, nil)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q(sqlEnqueue, boundary, evs).Scan(&n); err != nil {
		return 0, translate(op, boundary, nil, err)
	}
	return n, nil
}
