package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/datadir"
)

var _ backend.Store = (*Store)(nil)

// DBFile is the name of the database file inside the data directory.
const DBFile = "orisun.db"

// Defaults of Config.
const (
	DefaultSynchronous    = "FULL"
	DefaultGroupMaxEvents = 1000
)

// busyTimeout is how long a statement waits for a lock held by another
// connection before failing with SQLITE_BUSY (reported as ErrUnavailable).
// Only the WAL checkpoint and the readers compete with the one writer, so a
// wait this long means something is wrong.
const busyTimeout = 10 * time.Second

// readerConns is the size of the reader pool. Readers never block the writer
// in WAL mode; a few connections let the publisher, subscriptions and the
// read API run side by side.
const readerConns = 4

// Config configures Open.
type Config struct {
	// Dir is the data directory; the database is Dir/orisun.db. It is
	// created when missing and locked for this process until Close
	// (datadir.Acquire), unless Lock is set.
	Dir string
	// Lock, when set, is the caller's lock of Dir (a node locks its data
	// directory before it opens the store, whatever the backend): the
	// store relies on it instead of locking Dir itself, and leaves it
	// held at Close. The caller must keep it until the store is closed.
	Lock *datadir.Lock
	// Synchronous is SQLite's synchronous level: OFF, NORMAL, FULL or
	// EXTRA (default FULL: a committed append survives a power loss).
	Synchronous string
	// GroupMaxEvents is the most events one group commit gathers (default
	// 1000). A single append larger than this still commits, alone.
	GroupMaxEvents int
	// GroupDelay is the longest the writer waits, after the first request
	// of a group and the ones already waiting, for more requests to join.
	// It stops as soon as the group holds as many requests as the last one
	// did (their callers usually come back at once), so a lone caller
	// never waits. Default 0: a group takes what waits and commits at
	// once (the next group gathers while one commits anyway).
	GroupDelay time.Duration
	// Logger receives the store's logs (default: discarded).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Synchronous == "" {
		c.Synchronous = DefaultSynchronous
	}
	c.Synchronous = strings.ToUpper(c.Synchronous)
	if c.GroupMaxEvents == 0 {
		c.GroupMaxEvents = DefaultGroupMaxEvents
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: sqlite: Dir is empty; set the data directory", event.ErrInvalid)
	}
	switch c.Synchronous {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return fmt.Errorf("%w: sqlite: Synchronous is %q; use OFF, NORMAL, FULL or EXTRA", event.ErrInvalid, c.Synchronous)
	}
	if c.GroupDelay < 0 {
		return fmt.Errorf("%w: sqlite: GroupDelay is %s; it must not be negative", event.ErrInvalid, c.GroupDelay)
	}
	if c.GroupMaxEvents < 0 {
		return fmt.Errorf("%w: sqlite: GroupMaxEvents is %d; use a positive number (0 means %d)",
			event.ErrInvalid, c.GroupMaxEvents, DefaultGroupMaxEvents)
	}
	return nil
}

// Store is the SQLite backend. It is safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger
	// lock is the directory's lock when the store took it itself (nil
	// with Config.Lock): Close releases it.
	lock *datadir.Lock

	// wdb has exactly one connection: SQLite has one writer at a time, and
	// keeping it in Go makes waits visible (a queue, not SQLITE_BUSY).
	wdb *sql.DB
	// rdb is the reader pool (query_only).
	rdb *sql.DB
	// stmts are the writer's prepared statements (see prepareWriter);
	// dyn are those whose text is built at run time (conditions), prepared
	// by the writer between groups (see prepareConditions). Only the
	// writer goroutine touches dyn after Open.
	stmts map[string]*sql.Stmt
	dyn   map[string]*sql.Stmt
	// rstmts are the reader pool's prepared statements (prepareReaders),
	// never written after Open.
	rstmts map[string]*sql.Stmt
	// stmtUse counts how the statements of its transactions ran (groupTx).
	stmtUse stmtUse

	// requests carries appends to the writer goroutine. It is unbuffered
	// so a request is either taken by the writer or never sent: nothing is
	// left behind in a buffer when the writer stops.
	requests chan *sqlstore.Request
	// lends carries application transactions (Transact) to the writer
	// goroutine, which stands aside for each between two groups.
	lends   chan *lend
	closing chan struct{} // closed by Close
	done    chan struct{} // closed when the writer goroutine has returned

	closeOnce sync.Once
	closeErr  error

	callbacks backend.Callbacks
	// releases are the OnLeaseReleased callbacks.
	releases backend.Callbacks

	// now is the store's clock (commit times, lease expiries).
	now func() time.Time

	// leaseMu guards renewed and serialises every change of a lease:
	// acquisitions and releases hold it across their write transaction,
	// so a renewal in memory never interleaves with a change of term.
	leaseMu sync.Mutex
	// renewed holds, per boundary, the lease this store last acquired or
	// renewed (see RenewLease): its expiry is the lease's, at or after the
	// row's expires_at, which records the expiry as of the acquisition.
	renewed map[string]backend.Lease

	// waiting counts appends waiting for the writer to take them; groups
	// counts group transactions begun; merged counts runs of requests
	// appended together (appendRun). Tests use them to see the queue and
	// the path taken instead of sleeping.
	waiting atomic.Int64
	groups  atomic.Int64
	merged  atomic.Int64
	// expect is the writer's: how many requests its next group waits for
	// (see writer).
	expect int

	// hold is a test hook (see holdGroups): while set, the writer gathers
	// every request into one group until it is released.
	hold atomic.Pointer[groupHold]
}

// Open opens (creating when needed) the store in cfg.Dir, takes the
// directory's lock, applies pending migrations and starts the writer.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("sqlite: data directory %q: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: create data directory %q: %w", dir, err)
	}
	var lock *datadir.Lock
	if cfg.Lock == nil {
		if lock, err = datadir.Acquire(dir); err != nil {
			if errors.Is(err, datadir.ErrUnsupported) {
				// Without an exclusive directory lock two processes could
				// share one database and both believe their local leases
				// (docs/design.md §9).
				return nil, fmt.Errorf("%w: sqlite: %w", event.ErrUnavailable, err)
			}
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	} else if held, err := filepath.Abs(cfg.Lock.Dir()); err != nil || held != dir {
		return nil, fmt.Errorf("%w: sqlite: Config.Lock locks %q, not the data directory %q", event.ErrInvalid, cfg.Lock.Dir(), dir)
	}
	s := &Store{
		cfg:      cfg,
		log:      cfg.Logger.With("backend", "sqlite", "dir", dir),
		lock:     lock,
		requests: make(chan *sqlstore.Request),
		lends:    make(chan *lend),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		now:      time.Now,
		renewed:  map[string]backend.Lease{},
	}
	fail := func(err error) (*Store, error) {
		s.closeStmts()
		if s.rdb != nil {
			_ = s.rdb.Close()
		}
		if s.wdb != nil {
			_ = s.wdb.Close()
		}
		_ = lock.Release()
		return nil, err
	}

	path := filepath.Join(dir, DBFile)
	params := writerParams(cfg.Synchronous)
	for k, v := range testWriterParams {
		params[k] = v
	}
	s.wdb, err = sql.Open("sqlite", dsn(path, params))
	if err != nil {
		return fail(fmt.Errorf("sqlite: open %q: %w", path, err))
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	if err := s.wdb.PingContext(ctx); err != nil {
		return fail(translate(fmt.Sprintf("open %q", path), err))
	}
	// SQLite does not fail when it cannot switch to WAL: it stays in the
	// mode it was in. Without WAL the readers and the writer block each
	// other and the store's promises (reads beside a writing group, the
	// checkpoint beside appends) do not hold.
	var mode string
	if err := s.wdb.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fail(translate(fmt.Sprintf("open %q", path), err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fail(fmt.Errorf("sqlite: open %q: SQLite could not put the database in WAL mode (it stayed in %q mode): "+
			"the file system of the data directory %q lacks the shared memory WAL needs, as network file systems do; "+
			"put the data directory (ORISUN_DATA_DIR) on a local disk", path, mode, dir))
	}
	if err := s.migrate(ctx); err != nil {
		return fail(err)
	}
	var pageBytes int
	if err := s.wdb.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageBytes); err != nil {
		return fail(translate(fmt.Sprintf("open %q", path), err))
	}
	if err := s.prepareWriter(ctx); err != nil {
		return fail(err)
	}

	s.rdb, err = sql.Open("sqlite", dsn(path, readerParams()))
	if err != nil {
		return fail(fmt.Errorf("sqlite: open %q for reading: %w", path, err))
	}
	s.rdb.SetMaxOpenConns(readerConns)
	s.rdb.SetMaxIdleConns(readerConns)
	s.rdb.SetConnMaxLifetime(0)
	s.rdb.SetConnMaxIdleTime(0)
	if err := s.rdb.PingContext(ctx); err != nil {
		return fail(translate(fmt.Sprintf("open %q for reading", path), err))
	}
	if err := s.prepareReaders(ctx); err != nil {
		return fail(err)
	}

	go s.writer()
	s.log.Info("sqlite store open", "synchronous", cfg.Synchronous, "group_max_events", cfg.GroupMaxEvents,
		"group_delay", cfg.GroupDelay, "page_size", pageBytes)
	return s, nil
}

// dsn builds a modernc URI DSN. The path is escaped because SQLite decodes
// %XX in URIs and a '?' or '#' in a directory name would otherwise end it.
func dsn(path string, params url.Values) string {
	return "file:" + (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath() + "?" + params.Encode()
}

// PageSize is the page size of a database this store creates; a database
// created before keeps its own (SQLite fixes it at creation). The events
// table is WITHOUT ROWID, and a row of such a table that is larger than
// about a quarter of a page spills into an overflow page of its own: with
// SQLite's default of 4,096 bytes every event over about 1,000 bytes took a
// whole extra page (a 1 KB event cost 4.8 KB of disk) and every read of it
// one more read of the file. 8,192 keeps events up to about 2,000 bytes in
// their leaf page. 16,384 (up to about 4,000 bytes) read as fast but made
// the relay slower than 8,192 in every run. See docs/performance.md, "9.
// SQLite: 8 KB pages".
const PageSize = 8192

// WriterDSN is the connection string of the store's writer for the
// database file at path, with synchronous as in Config.Synchronous: the
// page size a new database gets, WAL, the busy timeout, BEGIN IMMEDIATE.
// For code that must write the same database as the store would (the
// bench's raw insert).
func WriterDSN(path, synchronous string) string {
	return dsn(path, writerParams(synchronous))
}

// ReaderDSN is the connection string of the store's readers for the
// database file at path: the busy timeout, query_only. For code that must
// read the database as the store does (the bench's raw read).
func ReaderDSN(path string) string {
	return dsn(path, readerParams())
}

// testWriterParams are added to the writer's connection parameters. Tests
// set them to stand in for a file system that SQLite cannot use WAL on.
var testWriterParams url.Values

func writerParams(synchronous string) url.Values {
	return url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			fmt.Sprintf("page_size(%d)", PageSize),
			"synchronous(" + synchronous + ")",
		},
		// The shorthand, not a _pragma: the driver runs the _pragma list
		// sorted by name, and journal_mode sorts before page_size; once a
		// new database is in WAL mode its page size is fixed. The
		// shorthand runs after the list.
		"_journal_mode": {"WAL"},
		// BEGIN IMMEDIATE: take the write lock at the start of a write
		// transaction, never upgrade a read lock halfway (which can fail
		// with SQLITE_BUSY without waiting).
		"_txlock": {"immediate"},
	}
}

func readerParams() url.Values {
	return url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			"query_only(1)",
		},
	}
}

// Close stops the writer (appends still queued get event.ErrClosed; a group
// already in its transaction finishes), closes the database and releases
// the directory lock. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		<-s.done
		var errs []error
		s.closeStmts()
		if err := s.rdb.Close(); err != nil {
			errs = append(errs, fmt.Errorf("sqlite: close readers: %w", err))
		}
		if err := s.wdb.Close(); err != nil {
			errs = append(errs, fmt.Errorf("sqlite: close writer: %w", err))
		}
		if err := s.lock.Release(); err != nil {
			errs = append(errs, fmt.Errorf("sqlite: %w", err))
		}
		s.closeErr = errors.Join(errs...)
		s.log.Info("sqlite store closed")
	})
	return s.closeErr
}

func (s *Store) closed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// errClosed is returned by every operation after Close.
func errClosed(op string) error {
	return fmt.Errorf("sqlite: %s: %w", op, sqlstore.Closed())
}

// OnAppend registers fn, called after every commit that added events, once
// per boundary that got events. It is called from the writer goroutine, so it
// must not block and must not append.
func (s *Store) OnAppend(fn func(boundary string)) {
	s.callbacks.Add(fn)
}

func (s *Store) notify(boundaries []string) {
	s.callbacks.Notify(boundaries...)
}

// translate turns a database error into an error of the core: a sentinel of
// package event, wrapped with op. The driver's error survives only as text,
// a backend.StoreDetail, so no caller can depend on sqlite types (the store
// seam, package backend) and no client is told the database's words.
func (s *Store) translate(op string, err error) error {
	if err != nil && s.closed() && !sqlstore.IsDomain(err) {
		return errClosed(op)
	}
	return translate(op, err)
}

func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if sqlstore.IsDomain(err) {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlite: %s: %w: %v", op, event.ErrUnavailable, err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("sqlite: %s: %v", op, err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_INTERRUPT,
		sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOLFS:
		return fmt.Errorf("sqlite: %s: %w: %w", op, event.ErrUnavailable, &backend.StoreDetail{Text: se.Error()})
	case sqlite3.SQLITE_CONSTRAINT:
		return fmt.Errorf("sqlite: %s: %w: %w", op, event.ErrConflict, &backend.StoreDetail{Text: se.Error()})
	}
	// CORRUPT, ERROR, MISUSE, …: an internal error, not retryable.
	return fmt.Errorf("sqlite: %s: %v", op, se)
}
