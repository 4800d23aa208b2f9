package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
)

// maxCachedRows: the id lookups and inserts of up to this many events (and
// of a full chunk) use statements prepared once at Open. Parsing a statement
// was about a quarter of the writer's time for single-event appends. Runs
// of more events are parsed each time: preparing every size up to 64
// at Open took five times as long and 2.8 MB of SQLite's memory
// (docs/performance.md, "SQLite: statements prepared once").
const maxCachedRows = 16

// sizedSQL is a statement whose text depends on a number of rows; the texts
// of the sizes the writer prepares are built once.
type sizedSQL struct {
	build func(n int) string
	small [maxCachedRows + 1]string
	chunk int
	full  string
}

func newSizedSQL(chunk int, build func(n int) string) *sizedSQL {
	s := &sizedSQL{build: build, chunk: chunk, full: build(chunk)}
	for n := 1; n <= maxCachedRows; n++ {
		s.small[n] = build(n)
	}
	return s
}

func (s *sizedSQL) text(n int) string {
	switch {
	case n <= maxCachedRows:
		return s.small[n]
	case n == s.chunk:
		return s.full
	}
	return s.build(n)
}

func (s *sizedSQL) cached() []string {
	return append(append([]string(nil), s.small[1:]...), s.full)
}

var (
	findIDsSQL = newSizedSQL(idChunk, func(n int) string {
		return sqlFindIDsPrefix + placeholders(n) + ")"
	})
	insertSQL = newSizedSQL(insertChunk, func(n int) string {
		var q strings.Builder
		q.Grow(len(sqlInsertEventsPrefix) + n*(len(sqlInsertEventsRow)+2))
		q.WriteString(sqlInsertEventsPrefix)
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(sqlInsertEventsRow)
		}
		return q.String()
	})
)

// Savepoint statements of the group transaction.
const (
	sqlSavepoint  = "SAVEPOINT " + savepoint
	sqlRelease    = "RELEASE " + savepoint
	sqlRollbackTo = "ROLLBACK TO " + savepoint + "; RELEASE " + savepoint
)

// prepareWriter prepares the writer's statements on the write connection.
// They are database-level statements: inside a transaction tx.StmtContext
// finds the one already prepared on that connection instead of parsing the
// text again (and prepares it anew if the connection was ever replaced).
// The map is never written after Open, so the writer reads it without a
// lock.
func (s *Store) prepareWriter(ctx context.Context) error {
	texts := []string{sqlTakeHead, sqlSelectEpoch, sqlSavepoint, sqlRelease, sqlSaveCheckpoint}
	texts = append(texts, findIDsSQL.cached()...)
	texts = append(texts, insertSQL.cached()...)
	var err error
	s.stmts, err = prepareAll(ctx, s.wdb, texts)
	return err
}

// prepareAll prepares texts on db. On an error the statements prepared
// before it are returned too, for closeStmts to close.
func prepareAll(ctx context.Context, db *sql.DB, texts []string) (map[string]*sql.Stmt, error) {
	stmts := make(map[string]*sql.Stmt, len(texts))
	for _, q := range texts {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return stmts, translate(fmt.Sprintf("prepare %.40q", q), err)
		}
		stmts[q] = st
	}
	return stmts, nil
}

// readTexts are the reads every page of the relay makes (the epoch and the
// head, then the page without a query) and a read-latest without a query:
// prepared on the reader pool at Open, each connection of it preparing
// them once (database/sql keeps a statement per connection), rather than
// parsed for every read.
var readTexts = []string{sqlSelectEpochHead, sqlReadAll, sqlLatestAny}

// prepareReaders prepares readTexts on the reader pool.
func (s *Store) prepareReaders(ctx context.Context) error {
	var err error
	s.rstmts, err = prepareAll(ctx, s.rdb, readTexts)
	return err
}

// readTx is a read transaction as an execer that uses the reader pool's
// prepared statements.
func (s *Store) readTx(tx *sql.Tx) groupTx {
	return groupTx{tx: tx, stmts: s.rstmts, use: &s.stmtUse}
}

// maxDynStmts bounds the condition statements the writer keeps prepared.
// Their text depends only on the shape of the query (how many items, and
// which have types and tags), so a workload has a handful; past the bound
// a condition's statement is parsed each time, as any other query.
const maxDynStmts = 64

// prepareConditions prepares, on the write connection, the statements the
// conditions of group will run, unless they are prepared already. It runs
// before the group's BEGIN: the write pool has one connection, which the
// transaction then holds. Parsing a condition's statement was a quarter of
// the writer's time for conditional appends. A statement that fails to
// prepare is left to fail (or not) in the transaction, where it is
// reported against its request.
func (s *Store) prepareConditions(ctx context.Context, group []*sqlstore.Request) {
	for _, r := range group {
		if r.Cond == nil || len(s.dyn) >= maxDynStmts {
			continue
		}
		text, _ := firstMatchSQL(&r.Cond.Query, r.Boundary, r.Cond.After)
		if s.stmts[text] != nil || s.dyn[text] != nil {
			continue
		}
		st, err := s.wdb.PrepareContext(ctx, text)
		if err != nil {
			continue
		}
		if s.dyn == nil {
			s.dyn = make(map[string]*sql.Stmt)
		}
		s.dyn[text] = st
	}
}

func (s *Store) closeStmts() {
	for _, st := range s.stmts {
		_ = st.Close()
	}
	for _, st := range s.rstmts {
		_ = st.Close()
	}
	for _, st := range s.dyn {
		_ = st.Close()
	}
}

// groupTx is a transaction as an execer that uses the prepared statements
// where it has them: the group transaction (the writer's statements), a
// checkpoint's (the same) or a read's (the readers').
type groupTx struct {
	tx         *sql.Tx
	stmts, dyn map[string]*sql.Stmt
	// use counts the statements run prepared and those run as text, which
	// the driver parses each time (TestStatementsPrepared).
	use *stmtUse
}

// stmtUse counts how the statements of transactions ran.
type stmtUse struct{ prepared, parsed atomic.Int64 }

// ran counts a statement run prepared or as text.
func (g groupTx) ran(prepared bool) {
	if prepared {
		g.use.prepared.Add(1)
	} else {
		g.use.parsed.Add(1)
	}
}

// stmt is the prepared statement of query, or nil.
func (g groupTx) stmt(query string) *sql.Stmt {
	if st := g.stmts[query]; st != nil {
		return st
	}
	return g.dyn[query]
}

func (g groupTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st := g.stmt(query)
	g.ran(st != nil)
	if st != nil {
		return g.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return g.tx.ExecContext(ctx, query, args...)
}

func (g groupTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st := g.stmt(query)
	g.ran(st != nil)
	if st != nil {
		return g.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return g.tx.QueryContext(ctx, query, args...)
}

func (g groupTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st := g.stmt(query)
	g.ran(st != nil)
	if st != nil {
		return g.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return g.tx.QueryRowContext(ctx, query, args...)
}
