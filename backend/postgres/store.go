package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

var _ backend.Store = (*Store)(nil)

// Defaults of Config.
const (
	DefaultMaxConns           = 8
	DefaultGroupMaxEvents     = 1000
	DefaultListenReconnectMin = 100 * time.Millisecond
	DefaultListenReconnectMax = 5 * time.Second
)

// groupTimeout bounds one group transaction, lock waits included. A group
// that cannot finish in this time (the database is unreachable without the
// connection breaking, or another client holds a boundary's head row in a
// stuck transaction) fails with ErrUnavailable instead of holding its
// boundary, and Close, for ever.
const groupTimeout = time.Minute

// applicationName tells the store's connections apart in pg_stat_activity,
// unless the URL names one.
const (
	applicationName = "orisun"
	listenSuffix    = "-listener"
)

// Config configures Open.
type Config struct {
	// URL is the PostgreSQL connection string (a postgres:// URL or
	// keyword/value pairs, as libpq takes them).
	URL string
	// MaxConns is the most connections of the store's pool (default 8).
	// Half of them (at least one) can be group transactions at once, so
	// reads, checkpoints and leases always find one too (with MaxConns 1
	// they share it with the one group). The listener has one more
	// connection of its own.
	MaxConns int32
	// GroupMaxEvents is the most events one group commit gathers (default
	// 1000). A single append larger than this still commits, alone.
	GroupMaxEvents int
	// GroupDelay is the longest a worker waits, once a boundary has a
	// request and before it takes the boundary's group, for more requests
	// to join. It stops as soon as as many wait as the boundary's last
	// group held plus those that arrived while it ran (its callers usually come
	// back at once), so a lone caller never waits. Default 0: a group takes
	// what waits and commits at once (the next group of the boundary
	// gathers while one commits anyway).
	GroupDelay time.Duration
	// Logger receives the store's logs (default: discarded).
	Logger *slog.Logger
	// ListenReconnectMin and ListenReconnectMax bound the exponential
	// back-off of the LISTEN connection's reconnects (defaults 100ms, 5s).
	ListenReconnectMin time.Duration
	ListenReconnectMax time.Duration
	// BeforeMoveCommit, a test seam, is called inside each MoveStaged
	// transaction after the events were moved and before the commit,
	// with the positions they took (first > last: none). Never set in
	// production.
	BeforeMoveCommit func(boundary string, first, last uint64)
}

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.GroupMaxEvents == 0 {
		c.GroupMaxEvents = DefaultGroupMaxEvents
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ListenReconnectMin == 0 {
		c.ListenReconnectMin = DefaultListenReconnectMin
	}
	if c.ListenReconnectMax == 0 {
		c.ListenReconnectMax = DefaultListenReconnectMax
	}
}

func (c *Config) validate() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: postgres: URL is empty; set the PostgreSQL connection URL", event.ErrInvalid)
	case c.MaxConns < 1:
		return fmt.Errorf("%w: postgres: MaxConns is %d; use a positive number (0 means %d)", event.ErrInvalid, c.MaxConns, DefaultMaxConns)
	case c.GroupMaxEvents < 1:
		return fmt.Errorf("%w: postgres: GroupMaxEvents is %d; use a positive number (0 means %d)",
			event.ErrInvalid, c.GroupMaxEvents, DefaultGroupMaxEvents)
	case c.GroupDelay < 0:
		return fmt.Errorf("%w: postgres: GroupDelay is %s; it must not be negative", event.ErrInvalid, c.GroupDelay)
	case c.ListenReconnectMin < 0 || c.ListenReconnectMax < 0:
		return fmt.Errorf("%w: postgres: ListenReconnectMin (%s) and ListenReconnectMax (%s) must not be negative",
			event.ErrInvalid, c.ListenReconnectMin, c.ListenReconnectMax)
	case c.ListenReconnectMin > c.ListenReconnectMax:
		return fmt.Errorf("%w: postgres: ListenReconnectMin (%s) is above ListenReconnectMax (%s)",
			event.ErrInvalid, c.ListenReconnectMin, c.ListenReconnectMax)
	}
	return nil
}

// Store is the PostgreSQL backend. It is safe for concurrent use, and any
// number of stores (in one process or on many nodes) may share a database.
type Store struct {
	cfg  Config
	log  *slog.Logger
	pool *pgxpool.Pool
	// listenCfg is the configuration of the LISTEN connection, which is
	// not from the pool: a pooled connection would be handed to others
	// between waits, and LISTEN belongs to a session.
	listenCfg *pgx.ConnConfig
	// unnamed is the query mode that sends a statement unnamed, which
	// PostgreSQL plans with its values every time (withValues): nil where
	// the pool's mode (a URL's default_query_exec_mode) sends every
	// statement unnamed already. pgx's default, cache_statement, prepares
	// them: then cache_describe, or describe_exec where the URL turned
	// the description cache off (description_cache_capacity=0), which
	// cache_describe refuses.
	unnamed *pgx.QueryExecMode

	// The append queue (see append.go). mu guards queues, ready, active
	// and closing; workers wait on cond.
	mu      sync.Mutex
	cond    *sync.Cond
	queues  map[string][]*sqlstore.Request
	ready   []string
	active  map[string]bool
	closing bool
	workers sync.WaitGroup
	// held are the boundaries whose groups a test holds open (holdGroups).
	held map[string]bool
	// expect is, per boundary, how many requests its next group expects:
	// the requests of its last group (their callers are likely to come
	// back at once) and those that arrived while it ran, counted when it
	// holds the head row (its answers come back then). A worker waiting
	// GroupDelay for a boundary stops as soon as that many are queued
	// (gathered closes).
	expect   map[string]int
	gathered map[string]chan struct{}
	// heads is, per boundary, its head as this store last saw it: after
	// a group took the head row or committed, and in Heads (see
	// groupRun.near).
	heads map[string]int64
	// lockedHook, when set (by tests), runs in a group's goroutine right
	// after the group took its head row and let the next group begin.
	lockedHook func(boundary string)
	// perRequest turns off merging the requests of a run into one append
	// statement (benchmarks compare both in one run).
	perRequest bool

	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error

	listenCancel context.CancelFunc
	listenDone   chan struct{}

	callbacks backend.Callbacks
	// releases are the OnLeaseReleased callbacks.
	releases backend.Callbacks
	// staged are the OnStaged callbacks (enqueue.go).
	staged backend.Callbacks

	// own are the server processes of the pool's connections: the
	// listener passes over a notification of a commit that one of them
	// sent, since the store has called the OnAppend callbacks after that
	// commit itself (listen.go). Each is known with the server's start
	// time, so that a dead connection's process id, after a restart of
	// the server, never matches another node's new connection.
	own *backendPIDs

	// waiting counts appends queued and not yet taken by a group; groups
	// counts group transactions begun, batches the pipelined batches (round
	// trips) they sent; listens counts LISTEN connections established,
	// notifications the notifications they received. Tests use them to see
	// the queue, the groups and the listener instead of sleeping.
	waiting       atomic.Int64
	groups        atomic.Int64
	batches       atomic.Int64
	listens       atomic.Int64
	notifications atomic.Int64
	// ownNotifications counts the notifications passed over as the
	// pool's own.
	ownNotifications atomic.Int64
}

// defaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// unnamedMode is Store.unnamed for a connection configuration.
func unnamedMode(c *pgx.ConnConfig) *pgx.QueryExecMode {
	if c.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	mode := pgx.QueryExecModeCacheDescribe
	if c.DescriptionCacheCapacity == 0 {
		mode = pgx.QueryExecModeDescribeExec
	}
	return &mode
}

// Open connects to the database of cfg.URL, applies pending migrations,
// starts the append workers and the LISTEN connection.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// Never repeat the URL: it may hold a password.
		return nil, fmt.Errorf("%w: postgres: URL is not a valid PostgreSQL connection string "+
			"(postgres://user@host:port/database?… or keyword=value pairs)", event.ErrInvalid)
	}
	poolCfg.MaxConns = cfg.MaxConns
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		// Without a connect_timeout in the URL, an unreachable host would
		// hold start-up (and every reconnect) for the OS's TCP timeout,
		// about two minutes on Linux.
		poolCfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := poolCfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		// A node frozen (SIGSTOP, a VM pause) inside a group transaction
		// holds its boundary's head row; the server ends such a session
		// after this long idle, so the other nodes' appends go on. A group
		// is never idle this long while it works: its statements are
		// pipelined.
		poolCfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	}
	if _, ok := poolCfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	}
	if _, ok := poolCfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		// pgx prepares every statement once per connection, and after five
		// runs PostgreSQL may switch a prepared statement to a generic
		// plan, costed without the values. For the statements of every
		// group that look a row up by its key (the head row's lock, the
		// checkpoint) the generic plan is the one plan there is, and
		// planning them on every run cost 0.05–0.09 ms each. (The relay's
		// page read takes its generic plan only while the table has no
		// statistics: PostgreSQL costs "position > $2" as a third of the
		// boundary and goes on planning it, 0.14 ms a run, more than
		// running it near the head.)
		// A read with a query is another matter: costed without its values
		// "position > $n" looks like a third of the table, and a read by a
		// rare tag walks every event of the boundary after the position
		// instead of the tag index (a first-match lookup became a
		// sequential scan: 15 ms instead of 0.3 ms on 20,000 events). Such
		// reads are sent unnamed (Store.withValues), which PostgreSQL
		// plans with their values every time, and the group transaction
		// sets the mode of each of its statements itself (see
		// sqlGenericPlans). The mode is set here rather than left to the
		// database's or the role's default so that those hold: under
		// force_generic_plan even an unnamed statement takes a generic
		// plan.
		poolCfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "auto"
	}
	own := newBackendPIDs()
	poolCfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		registerTypes(c.TypeMap())
		started, err := serverStarted(ctx, c)
		if err != nil {
			return err
		}
		own.add(c, backendKey{started, c.PgConn().PID()})
		return nil
	}
	poolCfg.BeforeClose = own.remove
	// The listener's application name is the pool's with a suffix, so
	// operators (and tests) can tell it apart in pg_stat_activity.
	listenCfg := poolCfg.ConnConfig.Copy()
	listenCfg.RuntimeParams["application_name"] = poolCfg.ConnConfig.RuntimeParams["application_name"] + listenSuffix

	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, translate("open pool", err)
	}
	s := &Store{
		cfg:        cfg,
		log:        cfg.Logger.With("backend", "postgres", "database", poolCfg.ConnConfig.Database),
		pool:       pool,
		own:        own,
		listenCfg:  listenCfg,
		unnamed:    unnamedMode(poolCfg.ConnConfig),
		queues:     make(map[string][]*sqlstore.Request),
		active:     make(map[string]bool),
		held:       make(map[string]bool),
		expect:     make(map[string]int),
		gathered:   make(map[string]chan struct{}),
		heads:      make(map[string]int64),
		closed:     make(chan struct{}),
		listenDone: make(chan struct{}),
	}
	s.cond = sync.NewCond(&s.mu)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		op := fmt.Sprintf("connect to %s:%d", poolCfg.ConnConfig.Host, poolCfg.ConnConfig.Port)
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The connect timeout, not the caller's context.
			return nil, fmt.Errorf("postgres: %s: %w: no answer within the connect timeout (%s): %v",
				op, event.ErrUnavailable, poolCfg.ConnConfig.ConnectTimeout, err)
		}
		return nil, translate(op, err)
	}
	if err := s.requireUTF8(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	s.checkAppRole(ctx)

	n := writers(cfg.MaxConns)
	s.workers.Add(n)
	for range n {
		go s.worker()
	}
	listenCtx, cancel := context.WithCancel(context.Background())
	s.listenCancel = cancel
	go s.listen(listenCtx)
	s.log.Info("postgres store open", "max_conns", cfg.MaxConns, "writers", n, "group_max_events", cfg.GroupMaxEvents,
		"group_delay", cfg.GroupDelay)
	return s, nil
}

// writers is how many group transactions may run at once: half the pool,
// so reads, checkpoints and leases always find connections too.
func writers(maxConns int32) int {
	return max(1, int(maxConns)/2)
}

// Close stops the append workers (appends still queued get
// event.ErrClosed; groups already in their transaction finish), the
// listener, and closes the pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		close(s.closed)
		for b, q := range s.queues {
			for _, r := range q {
				if r.Take() {
					s.waiting.Add(-1)
					r.Answer(sqlstore.Reply{Err: errClosed(fmt.Sprintf("append to %q", b))})
				}
			}
		}
		s.queues = map[string][]*sqlstore.Request{}
		s.ready = nil
		s.cond.Broadcast()
		s.mu.Unlock()
		s.workers.Wait()

		s.listenCancel()
		<-s.listenDone
		s.pool.Close()
		s.log.Info("postgres store closed")
	})
	return s.closeErr
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// errClosed is returned by every operation after Close.
func errClosed(op string) error {
	return fmt.Errorf("postgres: %s: %w", op, sqlstore.Closed())
}

// OnAppend registers fn, called once per boundary that got events: at once
// after a commit of this store (from its append worker), and when another
// store's commit is announced on the LISTEN connection (from the listener
// goroutine). A commit of this store is usually announced both ways: a
// callback is a hint, and fn must not block and must not append.
func (s *Store) OnAppend(fn func(boundary string)) {
	s.callbacks.Add(fn)
}

func (s *Store) notify(boundaries ...string) {
	s.callbacks.Notify(boundaries...)
}

// translate is the package's translate, with ErrClosed for the errors of
// an operation the store's Close cut short.
func (s *Store) translate(op string, err error) error {
	if err != nil && s.isClosed() && !sqlstore.IsDomain(err) {
		return errClosed(op)
	}
	return translate(op, err)
}

// notFound is the error of an operation on a boundary that does not exist.
func notFound(op, boundary string) error {
	return fmt.Errorf("postgres: %s: %w", op, sqlstore.NotFound(boundary))
}

var errNoRows = pgx.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
