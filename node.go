package orisun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/catchup"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/gctune"
	"github.com/orisun-io/orisun/internal/metrics"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/startstop"
	"github.com/orisun-io/orisun/lease"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/status/statushttp"
	"github.com/orisun-io/orisun/stream"
)

// Aliases of the domain types, so that users of the embedding API need one
// import.
type (
	Event            = event.Event
	Input            = event.Input
	Boundary         = event.Boundary
	Query            = event.Query
	QueryItem        = event.QueryItem
	Condition        = event.Condition
	AppendResult     = event.AppendResult
	Latest           = event.Latest
	Handler          = event.Handler
	SubscribeOptions = event.SubscribeOptions
)

// EventIn is the old name of Input.
//
// Deprecated: use Input, the one name of an event as appended (see
// CHANGELOG.md).
type EventIn = Input

// Node is one orisun process's relay: store, NATS, publishers, subscriptions.
type Node struct {
	cfg    Config
	holder string
	log    *slog.Logger
	// idFile is the file the node id was read from or written to; empty
	// when ORISUN_NODE_ID set it.
	idFile string
	// warning is a node-level problem for the status (a live twin with
	// this node id); nil when none.
	warning atomic.Pointer[string]
	limits  event.Limits

	version string
	http    *statushttp.Server

	// metrics are the node's counters and histograms; watch keeps the
	// store's health from the outcomes of its operations (storewatch.go).
	// Both nil only when a test switched the instrumentation off
	// (testhooks.Hooks.InstrumentationOff), to measure what it costs.
	metrics           *metrics.Metrics
	watch             *storeWatch
	noInstrumentation bool

	// Hooks for tests (fault points, set through internal/testhooks);
	// nil in production.
	afterAck func(boundary string, last uint64)
	// beforeMoveCommit is testhooks.Hooks.BeforeMoveCommit.
	beforeMoveCommit func(boundary string, first, last uint64)
	// brokenCheckpointOrder: see testhooks.Hooks.CheckpointBeforeAck.
	brokenCheckpointOrder bool
	wrapStore             func(backend.Store) backend.Store
	// natsSeam: see testhooks.Hooks.PermissionsOff.
	natsSeam func(*natsembed.Config)
	// beforeStreamMeasured: see testhooks.Hooks.BeforeStreamMeasured.
	beforeStreamMeasured func(boundary string)

	// life is the node's lifecycle (startstop.Base): Start runs start,
	// Stop runs teardown, each once, and the node's goroutines (the heads
	// watch, placement, adoptions) are its own. serving is set during
	// start once store and js are ready: requests may be served (the API
	// starts after it, and the status listener asks before it).
	life    startstop.Base
	serving atomic.Bool
	// mu guards what start sets and the accessors read (natsURL, ns,
	// http); start holds it throughout.
	mu sync.Mutex
	// dirLock is the data directory's lock (nil where it cannot be taken
	// with PostgreSQL, see lockData), held from start to the end of
	// teardown; gone are the holder names of the directory's earlier
	// processes, whose leases this node takes at once (docs/design.md §9),
	// less those placement found alive (goneHolders), under goneMu: the
	// slice is replaced, never changed in place.
	dirLock *datadir.Lock
	goneMu  sync.Mutex
	gone    []string
	store   backend.Store
	// rawStore is the store as the backend opened it (store is it wrapped:
	// by the store watch, and by a test's WrapStore).
	rawStore backend.Store
	ns       *natsembed.Server // nil with an external NATS
	// untune removes the embedded server's streams from the collector
	// tuner (internal/gctune); nil with an external NATS or noGCTuning.
	untune     func()
	noGCTuning bool
	natsURL    string
	// connect opens a connection of orisun's own: in process to the
	// embedded server, or to the external NATS.
	connect func(name string) (*nats.Conn, error)
	// connectAPI opens the API service's connection: on the embedded
	// server a user that may not publish into the event subjects.
	connectAPI func(name string) (*nats.Conn, error)
	nc         *nats.Conn
	js         jetstream.JetStream
	// batched: the server takes fast-ingest batches, so the streams are
	// created with them (streamLimits).
	batched bool
	api     *service.Service
	runCtx  context.Context
	cancel  context.CancelFunc
	subs    sync.WaitGroup

	// Placement (shared NATS only, placement.go): how many boundaries this
	// node leads, its fair share (0: unknown, no yielding), and a token
	// that lets one lease step down per placement round.
	leading  atomic.Int64
	fair     atomic.Int64
	stepDown atomic.Bool
	// registry is the store's table of live nodes (nil: no placement);
	// liveNodes the last count (0: unknown).
	registry  nodeRegistry
	liveNodes atomic.Int64
	// countNow asks placement for a count at once (recount); counted is
	// closed when the round that begins next has counted (nil while
	// placement does not run), under countMu. stopPlacement ends
	// placement and waits for it (nil when it was not started).
	countNow      chan struct{}
	countMu       sync.Mutex
	counted       chan struct{}
	stopPlacement func()

	// createMu makes the memory check of a new boundary and its creation
	// one step (memory.go): two boundaries created at once cannot both
	// take the last stream's memory.
	createMu sync.Mutex

	// rmu guards runners; wake takes only rmu, never mu, so the store's
	// after-commit callback cannot wait for a Stop that waits for the store.
	rmu     sync.RWMutex
	runners map[string]*boundaryRunner
}

// boundaryRunner is one boundary on this node: its lease runner, which
// runs the publisher while this node holds the lease, and what the status
// and the subscriptions read of it.
type boundaryRunner struct {
	pub   *publisher.Publisher
	lease *lease.Runner
	wake  chan struct{}
	// released is the lease runner's hint that the lease was released
	// (lease.Runner.Released).
	released chan struct{}
	// self is this node's lease holder; leading the node's count of the
	// boundaries it leads (placement); stallThreshold the node's
	// ORISUN_STALL_THRESHOLD.
	self           string
	leading        *atomic.Int64
	stallThreshold time.Duration
	// Subscription counters for the status.
	catchingUp, live, fallBacks atomic.Int64
	// heldElsewhere is when (unix nanoseconds) this node last found the
	// lease held by another node; 0 when it last failed to read it.
	heldElsewhere atomic.Int64
	// metrics are the boundary's counters (nil: instrumentation off).
	metrics *metrics.Boundary
	// move moves the boundary's staged events into the log while this
	// node leads (mover.go; nil: the store has none).
	move *mover
	// hist is what the console's charts draw (history.go).
	hist boundaryHistory
}

// fed reports whether the boundary's stream is being fed, as a hint for
// subscriptions (I5 never rests on it: every live message is checked
// against the position it must carry). With a NATS of its own, only this
// node's leading publisher feeds the stream. With a shared NATS (a cluster
// or an external deployment) the stream is the same on every node, so it is
// also fed while another node holds the lease: this node's lease loop saw
// that holder within the last lease TTL.
func (r *boundaryRunner) fed(shared bool, ttl time.Duration) bool {
	if r.pub.Status().State == status.StateLeading {
		return true
	}
	if !shared {
		return false
	}
	seen := r.heldElsewhere.Load()
	return seen != 0 && time.Since(time.Unix(0, seen)) < ttl
}

// New checks the configuration and returns a node that is not started.
// Without a node id it reads (or, the first time, writes) the data
// directory's node-id file.
//
// A started node with embedded NATS tunes the process's garbage collector
// (runtime/debug.SetGCPercent), since its memory streams are live heap that
// the collector's default room would double (docs/performance.md, "How much
// memory a node needs"). It leaves the collector alone when GOGC is set in
// the environment, when the program set a percentage of its own before or
// while the node runs, and with WithoutGCTuning.
func New(cfg Config, opts ...Option) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("orisun: configuration: %w", err)
	}
	idFile := ""
	if cfg.NodeID == "" {
		id, err := persistedNodeID(cfg.DataDir, !cfg.needsDataDir())
		if err != nil {
			return nil, fmt.Errorf("orisun: node id: %w", err)
		}
		cfg.NodeID, idFile = id, filepath.Join(cfg.DataDir, nodeIDFile)
	}
	// The lease holder is the node id plus a random part of this process's
	// own (its instance token): two processes given the same node id (or a
	// restarted one and the zombie of the old) must never share a (holder,
	// term), and placement's heartbeats find such twins by it.
	n := &Node{holder: cfg.NodeID + "#" + event.NewID()[28:], cfg: cfg, idFile: idFile, log: slog.New(slog.DiscardHandler),
		runners: map[string]*boundaryRunner{}, countNow: make(chan struct{}, 1)}
	for _, o := range opts {
		o(n)
	}
	// Made here, not in Start: Append reads them before it asks whether
	// the node is started.
	if !n.noInstrumentation {
		n.metrics = metrics.New(n.cfg.metricsBoundaries())
		n.watch = newStoreWatch(n.log.With("component", "store"), n.metrics)
	}
	return n, nil
}

// Option changes a Node at construction.
type Option func(*Node)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(n *Node) { n.log = l } }

// WithVersion sets the version the status reports.
func WithVersion(v string) Option { return func(n *Node) { n.version = v } }

// WithoutGCTuning leaves the process's garbage collector as the program
// set it: the node does not tune it for its memory streams (see New).
func WithoutGCTuning() Option { return func(n *Node) { n.noGCTuning = true } }

// Config returns the configuration in force (defaults applied).
func (n *Node) Config() Config { return n.cfg }

// Start opens the store, starts NATS, creates the configured boundaries and
// starts their publishers. On error everything started is stopped again,
// and the node cannot be started again. A second Start returns nil; a
// Start after Stop fails with event.ErrClosed.
func (n *Node) Start(ctx context.Context) error {
	err := n.life.Start(ctx, n.start, n.teardown)
	if errors.Is(err, startstop.ErrStopped) {
		return fmt.Errorf("orisun: start: %w", event.ErrClosed)
	}
	return err
}

// start is Start's work, in its order; n.life runs teardown when it fails.
func (n *Node) start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	// The status listener is bound first: a taken port fails the start
	// before any lease is taken, and probes get 503 "starting" instead of
	// no answer.
	if err := n.startHTTP(); err != nil {
		return err
	}
	if err := n.openData(ctx); err != nil {
		return err
	}
	if err := n.startNATS(); err != nil {
		return err
	}
	if err := n.connectRelay(); err != nil {
		return err
	}
	if r, ok := n.rawStore.(appendLimitsRecorder); ok {
		// The SQL append function enforces the limits the nodes recorded
		// (docs/outbox.md): a node that accepts less than the row allows is
		// refused here.
		if err := r.RecordAppendLimits(ctx, n.limits, n.holder); err != nil {
			return fmt.Errorf("orisun: %w", err)
		}
	}
	if n.cfg.NATSURL != "" {
		n.checkExternalNATS()
	}
	names, err := n.startBoundaries(ctx)
	if err != nil {
		return err
	}
	n.serving.Store(true)
	n.life.Go(func() { n.watchHeads(n.runCtx) })
	n.life.Go(func() { n.watchStreams(n.runCtx) })
	n.life.Go(func() { n.sampleHistory(n.runCtx) })
	if n.watch != nil {
		p, _ := n.rawStore.(writeProber)
		n.life.Go(func() { n.watch.watch(n.runCtx, p, n.cfg.PollInterval) })
	}
	if n.registry != nil {
		// A clean stop ends placement before the leases are released
		// (leave).
		stop, done := make(chan struct{}), make(chan struct{})
		n.stopPlacement = sync.OnceFunc(func() { close(stop); <-done })
		if !n.life.Go(func() { defer close(done); n.placement(n.runCtx, stop, n.registry) }) {
			close(done)
		}
	}
	// The API comes last: every request it serves finds the node ready.
	if err := n.startAPI(); err != nil {
		return err
	}
	n.log.Info("orisun started", "node_id", n.cfg.NodeID, "lease_holder", n.holder, "data_dir", n.cfg.DataDir,
		"nats_url", withoutUserinfo(n.natsURL), "shared_nats", n.cfg.SharedNATS(), "boundaries", names)
	return nil
}

// startHTTP starts the status listener, when it is on.
func (n *Node) startHTTP() error {
	if !n.cfg.HTTPEnabled() {
		return nil
	}
	n.http = statushttp.NewServer(n, statushttp.Options{
		Addr:           n.cfg.HTTPAddr,
		StallThreshold: n.cfg.StallThreshold,
		Logger:         n.log.With("component", "http"),
		Collectors:     n.metrics.Collectors(),
		BoundaryLabel:  n.metrics.Label,
		Console:        n.cfg.consoleAccess(),
		Events:         consoleSource{n},
	})
	if err := n.http.Start(); err != nil {
		return fmt.Errorf("orisun: %w", err)
	}
	return nil
}

// openData makes and locks the data directory and opens the store
// (wrapped for tests), with its table of live nodes when placement is on.
func (n *Node) openData(ctx context.Context) error {
	if err := prepareDataDir(n.cfg.DataDir, n.cfg.needsDataDir()); err != nil {
		return fmt.Errorf("orisun: %w", err)
	}
	if err := n.lockData(); err != nil {
		return err
	}
	store, err := n.openStore(ctx)
	if err != nil {
		return fmt.Errorf("orisun: open store: %w", err)
	}
	// Assigned only on success: a nil *sqlite.Store in the interface would
	// not compare equal to nil.
	n.store = store
	if n.cfg.Placement() {
		// Taken from the store itself, not from a test's wrapper of it.
		reg, ok := store.(nodeRegistry)
		if !ok {
			return fmt.Errorf("orisun: placement needs the store's table of live nodes, which the %s backend lacks", n.cfg.Backend)
		}
		n.registry = reg
	}
	if n.wrapStore != nil {
		n.store = n.wrapStore(store)
	}
	n.rawStore = store
	if n.watch != nil {
		n.store = watchStore(n.store, n.watch)
	}
	return nil
}

// lockData locks the data directory for this process, whatever the
// backend, and records this process's lease holder name in it before any
// lease is taken (datadir.Lock.Claim). The lock keeps a second process off
// the directory (SQLite's database, the embedded NATS store), and it is the
// proof behind a restart's early takeover: every holder the lock file names
// held this lock before, so it has ended, and its leases are taken at once
// instead of after ORISUN_LEASE_TTL (docs/design.md §9). A process with
// another directory is another node, even with the same node id: it never
// takes a live holder's lease early. With PostgreSQL on a system without
// directory locks the node runs without one, and a restart waits for the
// TTL. So it does with PostgreSQL and an external NATS (ORISUN_NATS_URL)
// where the lock file cannot be written (a read-only directory, as in a
// stateless container with ORISUN_NODE_ID set): nothing else of the node
// lives there, and such a node ran before the lock existed. Another
// process holding the lock is refused whatever the backend.
func (n *Node) lockData() error {
	l, err := datadir.Acquire(n.cfg.DataDir)
	if err == nil {
		if err = l.Claim(n.holder); err != nil {
			_ = l.Release()
		}
	}
	var held *datadir.LockedError
	switch {
	case err == nil:
	case errors.Is(err, datadir.ErrUnsupported) && n.cfg.Backend == "postgres":
		n.log.Warn("the data directory cannot be locked on this system: a restarted node waits ORISUN_LEASE_TTL for its own leases",
			"data_dir", n.cfg.DataDir, "err", err)
		return nil
	case !n.cfg.needsDataDir() && !errors.As(err, &held):
		n.log.Warn("the data directory cannot be locked (ORISUN_DATA_DIR is not writable?): this node runs without its lock, "+
			"so after a crash its next process waits ORISUN_LEASE_TTL for this one's leases instead of taking them at once; "+
			"make ORISUN_DATA_DIR writable to have them taken at once", "data_dir", n.cfg.DataDir, "err", err)
		return nil
	default:
		return fmt.Errorf("orisun: ORISUN_DATA_DIR: %w", err)
	}
	n.dirLock, n.gone = l, l.Gone()
	if why := l.Copied(); why != "" {
		n.log.Warn("the data directory's lock file was copied: the leases of the processes it names are left to expire, "+
			"since they may still run elsewhere", "why", why)
	}
	if len(n.gone) > 0 {
		n.log.Info("data directory locked: leases still held by its earlier processes are taken at once", "data_dir", n.cfg.DataDir,
			"earlier_holders", n.gone)
	}
	return nil
}

// connectRelay opens the publishers' connection and JetStream context, and
// sets the append limits the connection's max payload implies.
func (n *Node) connectRelay() error {
	var err error
	n.nc, err = n.connect("orisun-relay")
	if err != nil {
		return fmt.Errorf("orisun: %w", err)
	}
	n.js, err = jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(max(n.cfg.PublishWindow*2, 4000)))
	if err != nil {
		return fmt.Errorf("orisun: jetstream: %w", err)
	}
	// Fast-ingest batches (docs/design.md §5, "Batches") where the
	// server takes them: JetStream API level 4, nats-server 2.14. A
	// server that does not say, or says less, gets streams without them.
	actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	info, ierr := n.js.AccountInfo(actx)
	cancel()
	n.batched = ierr == nil && info.API.Level >= batchedAPILevel
	switch {
	case ierr != nil:
		n.log.Warn("the JetStream account info could not be read: new streams are created without fast-ingest batches, and every page to them is published one message at a time", "err", ierr)
	case !n.batched:
		n.log.Info("the NATS server takes no fast-ingest batches (JetStream API level below 4, nats-server before 2.14): new streams are created without them, and every page to them is published one message at a time", "api_level", info.API.Level)
	}
	n.limits = event.Limits{
		MaxAppendEvents: n.cfg.MaxAppendEvents,
		MaxAppendBytes:  n.cfg.MaxAppendBytes,
		MaxEventBytes:   int(n.nc.MaxPayload()),
		EncodedSize:     stream.EncodedSize,
	}
	return nil
}

// startBoundaries creates the configured boundaries and starts a publisher
// for every stored one, also those created through the API on an earlier
// run and not in the configuration. It returns their names.
func (n *Node) startBoundaries(ctx context.Context) ([]string, error) {
	n.runCtx, n.cancel = context.WithCancel(context.Background())
	n.store.OnAppend(n.wake)
	n.store.OnLeaseReleased(n.leaseReleased)
	if m, ok := n.rawStore.(stagedMover); ok {
		m.OnStaged(n.stagedWake)
	}
	for _, name := range n.cfg.Boundaries {
		if _, err := n.createBoundary(ctx, n.store, name); err != nil {
			return nil, fmt.Errorf("orisun: create boundary %q (ORISUN_BOUNDARIES): %w", name, err)
		}
	}
	all, err := n.store.Boundaries(ctx)
	if err != nil {
		return nil, fmt.Errorf("orisun: list boundaries: %w", err)
	}
	names := make([]string, 0, len(all))
	for _, b := range all {
		n.startBoundary(b.Name)
		names = append(names, b.Name)
	}
	return names, nil
}

// startAPI starts the NATS API service. It has a connection of its own, so
// that its requests never queue behind the publishers' traffic, and Stop
// can drain it first.
func (n *Node) startAPI() error {
	apiNC, err := n.connectAPI("orisun-api")
	if err != nil {
		return fmt.Errorf("orisun: %w", err)
	}
	n.api, err = service.Start(apiNC, apiBackend{n}, service.Config{
		Metadata: map[string]string{"node_id": n.cfg.NodeID},
		Logger:   n.log.With("component", "api"),
		Refused:  n.refused,
	})
	if err != nil {
		apiNC.Close()
		return fmt.Errorf("orisun: %w", err)
	}
	return nil
}

// startNATS starts the embedded server (alone or clustered), or prepares
// connections to the external NATS of ORISUN_NATS_URL.
func (n *Node) startNATS() error {
	auth, tlsCfg := n.cfg.natsAccess()
	if n.cfg.NATSURL != "" {
		// orisun's own inbox prefix there too: a deployment can then let
		// applications publish on _INBOX.> without letting them forge a
		// JetStream acknowledgement to the relay (docs/security.md).
		opts := []nats.Option{nats.MaxReconnects(-1), nats.CustomInboxPrefix(natsembed.InternalInboxPrefix)}
		switch {
		case n.cfg.NATSCreds != "":
			opts = append(opts, nats.UserCredentials(n.cfg.NATSCreds))
		case n.cfg.NATSToken != "":
			opts = append(opts, nats.Token(n.cfg.NATSToken))
		case n.cfg.NATSUser != "":
			opts = append(opts, nats.UserInfo(n.cfg.NATSUser, n.cfg.NATSPassword))
		}
		if n.cfg.NATSTLSCA != "" {
			opts = append(opts, nats.RootCAs(n.cfg.NATSTLSCA))
		}
		if n.cfg.NATSTLSCert != "" {
			opts = append(opts, nats.ClientCert(n.cfg.NATSTLSCert, n.cfg.NATSTLSKey))
		}
		n.natsURL = n.cfg.NATSURL
		n.connect = func(name string) (*nats.Conn, error) {
			nc, err := nats.Connect(n.cfg.NATSURL, append([]nats.Option{nats.Name(name)}, opts...)...)
			if err != nil {
				return nil, fmt.Errorf("connect %s to the external NATS %s: %w", name, withoutUserinfo(n.cfg.NATSURL), err)
			}
			return nc, nil
		}
		// The user's deployment decides the permissions; the API refuses
		// reply subjects inside the event subjects itself (api package).
		n.connectAPI = n.connect
		return nil
	}
	if auth == nil && !isLoopback(n.cfg.NATSHost) {
		n.log.Warn("the embedded NATS server listens beyond loopback without authentication: anyone who can reach it "+
			"is the application (it can append, and without ORISUN_NATS_ADMIN_* create boundaries, through the API and read every event stream, "+
			"though never write into one); set ORISUN_NATS_USER/ORISUN_NATS_PASSWORD or ORISUN_NATS_TOKEN",
			"host", n.cfg.NATSHost)
	}
	cluster := n.cfg.natsCluster()
	if cluster != nil && cluster.User == "" && !isLoopback(cluster.Host) {
		n.log.Warn("the embedded NATS server accepts routes beyond loopback without authentication: any server that can reach "+
			"the cluster port can join the cluster; set ORISUN_NATS_CLUSTER_USER/ORISUN_NATS_CLUSTER_PASSWORD", "host", cluster.Host)
	}
	if cluster != nil && n.cfg.StreamReplicas == 1 {
		n.log.Warn("the event streams have one replica in an embedded NATS cluster: each boundary's stream lives on one "+
			"server, and while that node is down the boundary's stream is offline for every node (JetStream error 10118), "+
			"so no node can publish the boundary and live subscriptions wait until it returns; set ORISUN_NATS_STREAM_REPLICAS=3 "+
			"(three or more nodes) so that a stream survives the loss of a node", "stream_replicas", n.cfg.StreamReplicas)
	}
	nsCfg := natsembed.Config{
		Host:       n.cfg.NATSHost,
		Port:       n.cfg.NATSPort,
		StoreDir:   filepath.Join(n.cfg.DataDir, "jetstream"),
		MaxPayload: n.cfg.NATSMaxPayload,
		// In a cluster the server name is the JetStream peer's name:
		// unique per node and stable across its restarts.
		ServerName: serverName(n.cfg),
		Auth:       auth,
		Admin:      n.cfg.natsAdmin(),
		System:     n.cfg.natsSystem(),
		MaxMemory:  n.cfg.NATSMaxMemory,
		TLS:        tlsCfg,
		Cluster:    cluster,
		Monitor:    n.cfg.natsMonitor(),
		Logger:     n.log.With("component", "nats"),
	}
	if n.natsSeam != nil {
		n.natsSeam(&nsCfg)
	}
	var err error
	n.ns, err = natsembed.New(nsCfg)
	if err != nil {
		return fmt.Errorf("orisun: %w", err)
	}
	if err := n.ns.Start(); err != nil {
		return fmt.Errorf("orisun: %w", natsStartError(err))
	}
	n.natsURL = n.ns.ClientURL()
	// The memory streams are live heap: keep them out of the collector's
	// room (docs/performance.md, "How much memory a node needs").
	if !n.noGCTuning {
		n.untune = gctune.Register(n.ns.StreamBytes, n.log.With("component", "gc"))
	}
	n.connect = func(name string) (*nats.Conn, error) { return n.ns.Connect(name) }
	n.connectAPI = func(name string) (*nats.Conn, error) { return n.ns.ConnectAPI(name) }
	return nil
}

// serverName names the embedded server: the node id, in the characters a
// NATS server name may hold.
func serverName(cfg Config) string {
	if cfg.NATSClusterName == "" {
		return "orisun"
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '*' || r == '>' || r < ' ' {
			return '_'
		}
		return r
	}, cfg.NodeID)
}

// appendLimitsRecorder is a store whose SQL append function reads the
// nodes' append limits (PostgreSQL's orisun_append).
type appendLimitsRecorder interface {
	RecordAppendLimits(ctx context.Context, lim event.Limits, by string) error
}

// openStore opens the configured backend.
func (n *Node) openStore(ctx context.Context) (backend.Store, error) {
	switch n.cfg.Backend {
	case "postgres":
		s, err := postgres.Open(ctx, postgres.Config{
			URL:            n.cfg.PGURL,
			MaxConns:       n.cfg.PGMaxConns,
			GroupMaxEvents: n.cfg.AppendGroupMax,
			GroupDelay:     max(0, n.cfg.AppendGroupDelay),
			Logger:         n.log.With("component", "postgres"),

			BeforeMoveCommit: n.beforeMoveCommit,
		})
		if err != nil {
			// The store's errors say what failed (connect, migrate) but
			// not where its URL came from.
			return nil, fmt.Errorf("ORISUN_PG_URL: %w", err)
		}
		return s, nil
	default:
		s, err := sqlite.Open(ctx, sqlite.Config{
			Dir:            n.cfg.DataDir,
			Lock:           n.dirLock,
			Synchronous:    strings.ToUpper(n.cfg.SQLiteSynchronous),
			GroupMaxEvents: n.cfg.AppendGroupMax,
			GroupDelay:     max(0, n.cfg.AppendGroupDelay),
			Logger:         n.log.With("component", "sqlite"),
		})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// startBoundary starts the lease runner and the publisher of a boundary,
// unless it runs already. It runs within start, or under n.life.IfRunning:
// never once teardown has begun, which stops every runner it finds.
func (n *Node) startBoundary(name string) {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	if _, ok := n.runners[name]; ok {
		return
	}
	r := n.newBoundaryRunner(name)
	n.runners[name] = r
	// Neither can fail: both are new, and the runner has its boundary and
	// its leader work.
	_ = r.pub.Start(n.runCtx)
	_ = r.lease.Start(n.runCtx)
}

// newBoundaryRunner makes the publisher and the lease runner of a boundary.
func (n *Node) newBoundaryRunner(name string) *boundaryRunner {
	r := &boundaryRunner{wake: make(chan struct{}, 1), released: make(chan struct{}, 1), self: n.holder, leading: &n.leading,
		stallThreshold: n.cfg.StallThreshold, metrics: n.metrics.Add(name)}
	onPublished := func(events int, last uint64, took time.Duration, fast bool) {
		r.hist.published.Store(last)
		r.metrics.Published(events, took, fast)
	}
	onFound := func(events int, last uint64) {
		r.hist.published.Store(last)
		r.metrics.Found(events)
	}
	var afterAck func(uint64)
	if n.afterAck != nil {
		afterAck = func(last uint64) { n.afterAck(name, last) }
	}
	r.pub = publisher.New(publisher.Config{
		Boundary:      name,
		Store:         n.store,
		JS:            n.js,
		Limits:        n.streamLimits(),
		BatchSize:     n.cfg.PublishBatch,
		Window:        n.cfg.PublishWindow,
		PollInterval:  n.cfg.PollBackstop,
		ProbeInterval: n.cfg.PollInterval,
		CheckInterval: n.cfg.PollBackstop,
		LeaseTTL:      n.cfg.LeaseTTL,
		MsgID:         n.cfg.MsgID,
		Wake:          r.wake,
		Logger:        n.log.With("component", "publisher"),
		AfterAck:      afterAck,
		OnPublished:   onPublished,
		OnFound:       onFound,

		CheckpointBeforeAck: n.brokenCheckpointOrder,
	})
	r.lease = &lease.Runner{Store: n.store, Holder: n.holder, TTL: n.cfg.LeaseTTL, Logger: n.log.With("component", "lease"),
		Gone: n.goneHolders, Released: r.released, Boundary: name, Lead: r.lead, Standby: r.standby}
	if n.cfg.Placement() {
		r.lease.Yield, r.lease.StepDown, r.lease.Recount = n.yield, n.takeStepDown, n.recount
		// A leader whose publisher cannot publish (its NATS connection
		// is broken, the store fails for it alone, a stream it may not
		// write) would keep renewing the lease and keep the boundary
		// from every other node. On a shared NATS another node can feed
		// the same stream, so a publisher stalled for longer than
		// ORISUN_STALL_THRESHOLD gives the lease up. A node with a NATS
		// of its own (or a SQLite node, alone with its store) keeps
		// leading: nobody else could feed its stream, and stepping down
		// would only add a hold-off to the stall.
		r.lease.Stalled = r.stalled
	}
	r.move = n.newMover(name)
	return r
}

// streamLimits are the limits of every boundary's stream, from the
// configuration.
func (n *Node) streamLimits() stream.Limits {
	return stream.Limits{
		MaxBytes: n.cfg.EventStreamMaxBytes,
		MaxMsgs:  n.cfg.EventStreamMaxMsgs,
		MaxAge:   max(n.cfg.EventStreamMaxAge, 0),
		Replicas: n.cfg.StreamReplicas,
		Batched:  n.batched,
	}
}

// batchedAPILevel is the JetStream API level of the servers that take
// fast-ingest batches (nats-server 2.14).
const batchedAPILevel = 4

// lead is the lease runner's leader work: the publisher's run, counted
// among the boundaries this node leads.
func (r *boundaryRunner) lead(ctx context.Context, l backend.Lease) error {
	r.leading.Add(1)
	defer r.leading.Add(-1)
	r.hist.startTerm()
	defer r.hist.leads.Store(false)
	r.metrics.Lease(metrics.LeaseAcquired)
	stopMover := r.move.start(ctx, l)
	err := r.pub.Run(ctx, l)
	stopMover()
	r.metrics.Lease(leaseEnd(ctx, err))
	return err
}

// leaseEnd says how a term of this node's ended, from what its leader work
// returned and why its context ended: lost to a newer term or to expiry
// (the lease runner cancels with that cause), else released.
func leaseEnd(ctx context.Context, err error) metrics.LeaseChange {
	cause := context.Cause(ctx)
	var expired *lease.ExpiredError
	if errors.Is(err, event.ErrLeaseLost) || errors.Is(cause, event.ErrLeaseLost) || errors.As(cause, &expired) {
		return metrics.LeaseLost
	}
	return metrics.LeaseReleased
}

// stalled says why the publisher has been stalled for longer than the stall
// threshold, or "" (lease.Runner.Stalled).
func (r *boundaryRunner) stalled() string {
	d, why := r.pub.Stalled(time.Now())
	if d <= r.stallThreshold {
		return ""
	}
	return fmt.Sprintf("publisher stalled for %s, longer than ORISUN_STALL_THRESHOLD (%s): %s",
		d.Round(time.Millisecond), r.stallThreshold, why)
}

// standby is the lease runner's observer while this node does not lead the
// boundary: it records whether another node holds the lease (which feeds a
// shared stream, see fed) and gives the publisher's status its reason.
func (r *boundaryRunner) standby(holder backend.Lease, err error) {
	var sd *lease.SteppedDownError
	switch {
	case errors.As(err, &sd):
		// Holding off after a stall: standby once another node holds the
		// lease (it feeds the shared stream), stalled until then.
		if holder.Holder != "" && holder.Holder != r.self && holder.Expires.After(time.Now()) {
			r.heldElsewhere.Store(time.Now().UnixNano())
			r.pub.SetStandby("lease held by " + lease.Describe(holder) + "; this node " + sd.Error())
		} else {
			r.heldElsewhere.Store(0)
			r.pub.SetStalled(err.Error())
		}
	case errors.Is(err, lease.ErrYielded):
		r.heldElsewhere.Store(0)
		r.pub.SetStandby("no holder; this node leads its share of boundaries and leaves the lease to the others")
	case errors.Is(err, event.ErrLeaseHeld):
		r.heldElsewhere.Store(time.Now().UnixNano())
		r.pub.SetStandby("lease held by " + lease.Describe(holder))
	default:
		// Nobody can take the lease while the store fails: this node is
		// not standing by for a leader, it is stuck.
		r.heldElsewhere.Store(0)
		r.pub.SetStalled("lease not acquired: " + err.Error())
	}
}

// adopt starts the publisher of a boundary that exists in the store but not
// on this node.
func (n *Node) adopt(boundary string) {
	if event.ValidateBoundaryName(boundary) != nil {
		return
	}
	var store backend.Store
	var runCtx context.Context
	if !n.life.IfRunning(func() { store, runCtx = n.store, n.runCtx }) || n.runner(boundary) != nil {
		return
	}
	// The lookup runs outside the lifecycle's lock: appends and Stop must
	// not wait behind a slow database.
	ctx, cancel := serviceutil.WithTimeout(runCtx, 10*time.Second)
	defer cancel()
	if _, err := store.Boundary(ctx, boundary); err != nil {
		if runCtx.Err() == nil {
			n.log.Warn("a wake-up named a boundary this node cannot read; it is adopted on the next one", "boundary", boundary, "err", err)
		}
		return
	}
	n.life.IfRunning(func() {
		if n.runner(boundary) != nil {
			return
		}
		n.log.Info("boundary not run here yet (created by another node, or just now): starting its publisher", "boundary", boundary)
		n.startBoundary(boundary)
	})
}

func (n *Node) runner(boundary string) *boundaryRunner {
	n.rmu.RLock()
	defer n.rmu.RUnlock()
	return n.runners[boundary]
}

// wake is the store's after-commit callback: a non-blocking hint to the
// boundary's publisher.
func (n *Node) wake(boundary string) {
	r := n.runner(boundary)
	if r == nil {
		// A boundary this node does not run yet: created by another node
		// after this one started. Adopt it off the store's callback, on a
		// goroutine of the node (none once it has stopped).
		n.life.Go(func() { n.adopt(boundary) })
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// leaseReleased is the store's callback for a released lease (here or on
// another node): a non-blocking hint to the boundary's lease runner, whose
// standby then tries to take it at once.
func (n *Node) leaseReleased(boundary string) {
	if r := n.runner(boundary); r != nil {
		select {
		case r.released <- struct{}{}:
		default:
		}
	}
}

// watchHeads reads the head of every boundary in one statement per poll
// interval and wakes the publishers that have events to read (see
// publisher.Behind), and adopts a boundary this node does not run yet. It
// is what catches a lost wake-up, in place of each publisher reading its
// boundary every poll interval: with a thousand idle boundaries that was a
// thousand reads a second (docs/performance.md, "Scale"). Each publisher
// still polls, every PollBackstop, in case this loop fails to wake it (I4).
func (n *Node) watchHeads(ctx context.Context) { n.everyPoll(ctx, n.readHeads) }

// readHeads is one round of watchHeads; it returns whether the read failed.
func (n *Node) readHeads(ctx context.Context, failing bool) bool {
	rctx, cancel := serviceutil.WithTimeout(ctx, max(n.cfg.PollInterval, 10*time.Second))
	heads, err := n.store.Heads(rctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return failing
	case err != nil:
		if !failing {
			n.log.Warn("the heads of the boundaries cannot be read; each publisher reads its own every ORISUN_POLL_BACKSTOP meanwhile",
				"err", err, "poll_backstop", n.cfg.PollBackstop)
		}
		return true
	}
	if failing {
		n.log.Info("the heads of the boundaries are read again")
	}
	for _, h := range heads {
		r := n.runner(h.Boundary.Name)
		if r == nil {
			n.adopt(h.Boundary.Name)
			continue
		}
		r.hist.noteHead(h.Boundary.Epoch, h.Boundary.Head)
		if r.pub.Behind(h) {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
	n.wakeStaged(ctx)
	return false
}

// wakeStaged wakes the mover of every boundary with committed staged
// events (PostgreSQL's orisun_enqueue, docs/outbox.md): the part of the
// head check that catches an enqueue not announced (lost, or not sent). A mover of a
// boundary this node does not lead keeps the hint for its next term. A
// failed read is left to each mover's own backstop poll.
func (n *Node) wakeStaged(ctx context.Context) {
	sm, ok := n.rawStore.(stagedMover)
	if !ok {
		return
	}
	rctx, cancel := serviceutil.WithTimeout(ctx, max(n.cfg.PollInterval, 10*time.Second))
	names, err := sm.StagedBoundaries(rctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			n.log.Debug("the boundaries with staged events cannot be listed; each mover polls every ORISUN_POLL_BACKSTOP meanwhile", "err", err)
		}
		return
	}
	for _, name := range names {
		if r := n.runner(name); r != nil {
			r.move.notify()
		}
	}
}

// everyPoll runs round once per poll interval until ctx ends, telling it
// whether the last round failed (so that a failure is logged once, and its
// end once).
func (n *Node) everyPoll(ctx context.Context, round func(ctx context.Context, failing bool) bool) {
	failing := false
	for serviceutil.Sleep(ctx, n.cfg.PollInterval) {
		failing = round(ctx, failing)
	}
}

// watchStreams reads every stream's info in one listing (one JetStream
// request per 256 streams) per poll interval and wakes the leading
// publishers whose stream is not as they left it (see
// publisher.StreamDrifted): its configuration changed, it is missing, or it
// holds a sequence the idle publisher did not publish. Each then reads its
// own stream and repairs it (docs/design.md §12), within one poll interval
// and without waiting for an append; a thousand idle boundaries cost four
// requests a second here, not a thousand. Each publisher still checks its
// stream every PollBackstop, in case this listing fails. It runs apart
// from watchHeads, so that a slow JetStream does not delay the wake-ups.
func (n *Node) watchStreams(ctx context.Context) { n.everyPoll(ctx, n.listStreams) }

// listStreams is one round of watchStreams; it returns whether the listing
// failed (failing: whether the last one did).
func (n *Node) listStreams(ctx context.Context, failing bool) bool {
	if n.leading.Load() == 0 {
		return failing
	}
	lctx, cancel := context.WithTimeout(ctx, max(n.cfg.PollInterval, 10*time.Second))
	defer cancel()
	infos := make(map[string]*jetstream.StreamInfo)
	l := n.js.ListStreams(lctx)
	for info := range l.Info() {
		if b, ok := strings.CutPrefix(info.Config.Name, stream.Name("")); ok {
			infos[b] = info
		}
	}
	if err := l.Err(); err != nil {
		if ctx.Err() == nil && !failing {
			n.log.Warn("the streams cannot be listed; each publisher checks its own stream every ORISUN_POLL_BACKSTOP meanwhile",
				"err", err, "poll_backstop", n.cfg.PollBackstop)
		}
		return true
	}
	if failing {
		n.log.Info("the streams are listed again")
	}
	n.rmu.RLock()
	runners := make(map[string]*boundaryRunner, len(n.runners))
	maps.Copy(runners, n.runners)
	n.rmu.RUnlock()
	for name, r := range runners {
		if r.pub.StreamDrifted(infos[name]) {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
	return false
}

// Stop stops the publishers (each finishes sending its batch, awaits what
// is in flight and checkpoints it), releases the leases, ends the subscriptions (ErrClosed), and
// closes NATS and the store. Safe to call twice, concurrently, and before
// Start; every call returns once the node is stopped.
func (n *Node) Stop() error { return n.life.Stop(n.teardown) }

// teardown stops everything that was started, in order; it undoes a start
// that failed too. It never takes n.mu: the store's after-commit callback
// (wake) may run until the store is closed.
func (n *Node) teardown() error {
	var errs []error
	if n.http != nil {
		// /readyz says "shutting down" while the publishers finish what
		// they have in flight; the listener closes once they have.
		n.http.Stopping()
	}
	// The API stops first: requests in flight finish while the store and
	// the publishers still run; new ones are refused as unavailable.
	if n.api != nil {
		if err := n.api.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// Out of placement before the leases are released: a standby woken
	// by a release then counts this node no more, and takes the lease at
	// once instead of yielding it to a node that is leaving.
	n.leave()
	if n.cancel != nil {
		n.cancel()
	}
	if err := n.stopBoundaries(); err != nil {
		errs = append(errs, err)
	}
	n.life.Wait()
	n.subs.Wait()
	if n.http != nil {
		if err := n.http.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop status listener: %w", err))
		}
	}
	if n.nc != nil {
		if err := n.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			n.nc.Close()
		}
		for i := 0; i < 100 && !n.nc.IsClosed(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		n.nc.Close()
	}
	if n.untune != nil {
		n.untune()
	}
	if n.ns != nil {
		n.ns.Stop()
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	// Last: nothing of this process uses the directory, nor holds a lease
	// under its holder name, any more.
	if err := n.dirLock.Release(); err != nil {
		errs = append(errs, err)
	}
	if n.life.Started() {
		n.log.Info("orisun stopped")
	}
	return errors.Join(errs...)
}

// stopBoundaries stops every boundary's lease runner (its publisher
// finishes its batch and checkpoints it, the lease is released) and then
// its publisher (what the publisher left running ends). n.cancel has ended
// them all at once: this waits for each.
func (n *Node) stopBoundaries() error {
	n.rmu.RLock()
	runners := make([]*boundaryRunner, 0, len(n.runners))
	for _, r := range n.runners {
		runners = append(runners, r)
	}
	n.rmu.RUnlock()
	var errs []error
	for _, r := range runners {
		errs = append(errs, r.lease.Stop(), r.pub.Stop())
	}
	return errors.Join(errs...)
}

// ready returns the parts of a started node, ErrUnavailable before Start
// has finished, or ErrClosed once Stop has begun. It takes no lock: the
// status listener calls it while Start (which holds the lifecycle's lock,
// possibly for seconds while the database connects) is still running.
func (n *Node) ready() (backend.Store, jetstream.JetStream, error) {
	if n.life.State() == startstop.Stopped {
		return nil, nil, fmt.Errorf("orisun: node stopped: %w", event.ErrClosed)
	}
	if !n.serving.Load() {
		return nil, nil, fmt.Errorf("orisun: node not started (or still starting): %w", event.ErrUnavailable)
	}
	// store and js were written before serving was set.
	return n.store, n.js, nil
}

// storeFor is the store for a request naming boundary name: the name is
// checked first, then whether the node serves (ready).
func (n *Node) storeFor(name string) (backend.Store, error) {
	if err := event.ValidateBoundaryName(name); err != nil {
		return nil, err
	}
	store, _, err := n.ready()
	return store, err
}

// CreateBoundary creates a boundary (or returns the existing one) and starts
// its publisher.
func (n *Node) CreateBoundary(ctx context.Context, name string) (Boundary, error) {
	store, err := n.storeFor(name)
	if err != nil {
		return Boundary{}, err
	}
	b, err := n.createBoundary(ctx, store, name)
	if err != nil {
		return Boundary{}, fmt.Errorf("create boundary %q: %w", name, err)
	}
	return b, nil
}

// createBoundary returns the boundary, creating it when its stream's
// memory fits the JetStream budget (memory.go) and refusing it otherwise.
func (n *Node) createBoundary(ctx context.Context, store backend.Store, name string) (Boundary, error) {
	n.createMu.Lock()
	defer n.createMu.Unlock()
	b, err := store.Boundary(ctx, name)
	if err != nil && !errors.Is(err, event.ErrNotFound) {
		return b, err
	}
	if err != nil {
		if err := n.checkStreamMemory(ctx, store, name); err != nil {
			return Boundary{}, err
		}
		if b, _, err = store.CreateBoundary(ctx, name); err != nil {
			return b, err
		}
	}
	// Started here, under createMu, so that the next check counts it
	// (boundaryCount); during start, startBoundaries starts them all.
	if n.serving.Load() {
		n.life.IfRunning(func() { n.startBoundary(name) })
	}
	return b, nil
}

// Boundary returns one boundary with its current head (ErrNotFound when it
// does not exist).
func (n *Node) Boundary(ctx context.Context, name string) (Boundary, error) {
	store, err := n.storeFor(name)
	if err != nil {
		return Boundary{}, err
	}
	b, err := store.Boundary(ctx, name)
	if err != nil {
		return Boundary{}, fmt.Errorf("boundary %q: %w", name, err)
	}
	return b, nil
}

// refused counts an API request the service refused before it reached
// Append, Read or ReadLatest (service.Config.Refused).
func (n *Node) refused(op, boundary string, err error) {
	b := n.metrics.Boundary(boundary)
	if op == "append" {
		b.Appended(0, err, -1)
	} else {
		b.Read(err, -1)
	}
}

// apiBackend serves the NATS API (package api/service) from the node.
type apiBackend struct{ *Node }

func (b apiBackend) Status(ctx context.Context) (any, error) { return b.Node.Status(ctx) }

// Boundaries lists the boundaries with their heads.
func (n *Node) Boundaries(ctx context.Context) ([]Boundary, error) {
	store, _, err := n.ready()
	if err != nil {
		return nil, err
	}
	return store.Boundaries(ctx)
}

// Append validates and appends events atomically (docs/design.md §3, §4). Nothing is
// written when any event is invalid. The events' Data and Metadata are
// used as given, not copied, until Append returns: do not change them
// meanwhile.
func (n *Node) Append(ctx context.Context, boundary string, events []Input, cond *Condition) (res AppendResult, err error) {
	if n.metrics != nil {
		start := time.Now()
		defer func() { n.metrics.Boundary(boundary).Appended(len(events), err, time.Since(start)) }()
	}
	store, _, err := n.ready()
	if err != nil {
		return AppendResult{}, err
	}
	prepared, err := event.Prepare(boundary, events, n.limits)
	if err != nil {
		return AppendResult{}, fmt.Errorf("append to %q: %w", boundary, err)
	}
	if cond != nil {
		if err := event.ValidateQuery(&cond.Query); err != nil {
			return AppendResult{}, fmt.Errorf("append to %q: condition: %w", boundary, err)
		}
	}
	res, err = store.Append(ctx, boundary, prepared, cond)
	if err != nil {
		return AppendResult{}, fmt.Errorf("append to %q: %w", boundary, err)
	}
	if r := n.runner(boundary); r != nil {
		r.hist.raiseHead(res.Last) // the console's charts (history.go)
	}
	return res, nil
}

// Read returns up to limit events after position after (limit ≤ 10,000).
func (n *Node) Read(ctx context.Context, boundary string, after uint64, limit int, q *Query) (epoch string, events []Event, err error) {
	return n.readPage(boundary, limit, q, func(s backend.Store) (string, []Event, error) {
		return s.Read(ctx, boundary, after, limit, q)
	})
}

// ReadBackward returns up to limit events before position before (0: from
// the head), newest first, matching q as Read does (limit ≤ 10,000): the
// log as a person browses it, a page at a time (the next page is before the
// last position returned).
func (n *Node) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *Query) (epoch string, events []Event, err error) {
	return n.readPage(boundary, limit, q, func(s backend.Store) (string, []Event, error) {
		return s.ReadBackward(ctx, boundary, before, limit, q)
	})
}

// readPage checks the arguments of a read of a page and runs read on the
// store, counted in the boundary's metrics.
func (n *Node) readPage(boundary string, limit int, q *Query, read func(backend.Store) (string, []Event, error)) (epoch string, events []Event, err error) {
	if n.metrics != nil {
		start := time.Now()
		defer func() { n.metrics.Boundary(boundary).Read(err, time.Since(start)) }()
	}
	store, _, err := n.ready()
	if err != nil {
		return "", nil, err
	}
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return "", nil, err
	}
	if limit < 1 || limit > 10000 {
		return "", nil, fmt.Errorf("%w: limit %d is outside 1–10000", event.ErrInvalid, limit)
	}
	if err := event.ValidateQuery(q); err != nil {
		return "", nil, err
	}
	epoch, events, err = read(store)
	if err != nil {
		// The store hands the good events before a bad row to the
		// publisher; a caller gets the error alone.
		return "", nil, err
	}
	return epoch, events, nil
}

// ReadLatest returns the last event of the boundary matching q (nil: any
// event; Latest.Event is nil when none matches) and the boundary's head,
// read in one snapshot: the context of a decision. Append the decision's
// events under a condition on the same query after latest.Head, and the
// append fails with a *event.ConflictError if an event matching q arrived
// meanwhile (docs/design.md §4); read again and decide again:
//
//	cond := &orisun.Condition{After: latest.Head} // a nil q: any event
//	if q != nil {
//		cond.Query = *q
//	}
//	_, err := node.Append(ctx, boundary, events, cond)
func (n *Node) ReadLatest(ctx context.Context, boundary string, q *Query) (_ Latest, err error) {
	if n.metrics != nil {
		start := time.Now()
		defer func() { n.metrics.Boundary(boundary).Read(err, time.Since(start)) }()
	}
	store, _, err := n.ready()
	if err != nil {
		return Latest{}, err
	}
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return Latest{}, err
	}
	if err := event.ValidateQuery(q); err != nil {
		return Latest{}, err
	}
	return store.Latest(ctx, boundary, q)
}

// Subscribe delivers the boundary's events after position after to h,
// exactly once each and in order, catching up from the store and then
// following the stream (docs/design.md §7). It returns when ctx ends (ctx's error),
// h fails, the epoch changes (ErrEpochChanged), the next event's stored row
// does not fit the log (event.ErrCorrupt, naming its position, after every
// event before it) or the node stops.
func (n *Node) Subscribe(ctx context.Context, boundary string, after uint64, h Handler, opts SubscribeOptions) error {
	var (
		store  backend.Store
		js     jetstream.JetStream
		r      *boundaryRunner
		runCtx context.Context
	)
	if !n.life.IfRunning(func() {
		store, js, r, runCtx = n.store, n.js, n.runner(boundary), n.runCtx
		n.subs.Add(1)
	}) {
		return fmt.Errorf("orisun: node not running: %w", event.ErrClosed)
	}
	defer n.subs.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(runCtx, cancel)
	defer stop()

	user := opts
	if r != nil {
		r.catchingUp.Add(1)
		phase := &r.catchingUp
		defer func() { phase.Add(-1) }()
		opts.OnCaughtUp = func(next uint64) {
			r.catchingUp.Add(-1)
			r.live.Add(1)
			phase = &r.live
			if user.OnCaughtUp != nil {
				user.OnCaughtUp(next)
			}
		}
		opts.OnFellBehind = func(next uint64, reason string) {
			r.live.Add(-1)
			r.catchingUp.Add(1)
			r.fallBacks.Add(1)
			phase = &r.catchingUp
			if user.OnFellBehind != nil {
				user.OnFellBehind(next, reason)
			}
		}
	}
	err := catchup.Subscribe(ctx, catchup.Config{
		Store: store,
		JS:    js,
		// Is the stream fed? A hint: while nobody feeds it (a standby of
		// a node with its own NATS, a stalled publisher) the subscription
		// reads the store instead of waiting on the stream.
		Live: func() bool {
			return r != nil && r.fed(n.cfg.SharedNATS(), n.cfg.LeaseTTL)
		},
		Logger: n.log.With("component", "subscription"),
	}, boundary, after, h, opts)
	if runCtx.Err() != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("orisun: subscription ended: %w", event.ErrClosed)
	}
	return err
}

// HTTPAddr is the address of the status listener ("" when off or not
// started).
func (n *Node) HTTPAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http == nil {
		return ""
	}
	return n.http.Addr()
}

// isLoopback reports whether host names the loopback interface only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NATSURL is the client URL of the embedded NATS server.
func (n *Node) NATSURL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.natsURL
}

// NATSClusterURL is the route URL of the embedded server's cluster
// listener (empty when not clustered, with an external NATS, or not
// started): what other nodes put in ORISUN_NATS_CLUSTER_ROUTES.
func (n *Node) NATSClusterURL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ns == nil {
		return ""
	}
	return n.ns.ClusterURL()
}

// NATSMonitorURL is the base URL of the embedded NATS server's own
// monitoring endpoint (http://host:port; /varz, /jsz, …), empty when
// ORISUN_NATS_MONITOR_ADDR is off, with an external NATS, or before start.
func (n *Node) NATSMonitorURL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ns == nil {
		return ""
	}
	return n.ns.MonitorURL()
}

// ConnectNATS opens a NATS connection with orisun's own permissions (in
// process to the embedded server, or to the external NATS): for tools that
// run inside the node's process, such as `orisun bench`, which measures raw
// JetStream publishes on the same server as the relay's. Whoever holds it
// can write into the event streams; never hand it to application code.
func (n *Node) ConnectNATS(name string) (*nats.Conn, error) {
	if _, _, err := n.ready(); err != nil {
		return nil, err
	}
	return n.connect(name)
}
