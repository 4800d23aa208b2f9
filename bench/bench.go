package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/gctune"
	"github.com/orisun-io/orisun/stream"
)

// Workloads are the names --only takes, in the order a run does them.
var Workloads = []string{"relay", "catchup", "append", "api", "latency", "scale", "outbox"}

// Config of a run. Zero values take the defaults of the command.
type Config struct {
	// Backend is sqlite or postgres.
	Backend string
	// PGURL is the PostgreSQL server (postgres:// URL) on which a fresh
	// database orisun_bench_<random> is created and dropped afterwards.
	// Its user must be allowed to CREATE DATABASE.
	PGURL string
	// Dir is the data directory (the SQLite database and JetStream's
	// store directory). Empty: a temporary directory, removed afterwards.
	// A given directory must be empty or missing, and is left in place.
	Dir string
	// Events is the backlog of the relay, catch-up and raw read and
	// publish measurements.
	Events int
	// EventBytes is the size of each event's data (JSON), default 1024.
	EventBytes int
	// AppendDuration is how long each append row runs.
	AppendDuration time.Duration
	// Callers are the concurrent callers of the single-event append rows.
	Callers []int
	// APIBoundaries is how many boundaries the api workload's row of
	// spread callers sends to: the most callers of Callers, caller i to
	// boundary i mod APIBoundaries (at most one boundary per caller).
	// 1: no such row; 0: the default.
	APIBoundaries int
	// Rates are the fixed rates (events/s) of the latency rows, each run
	// for LatencyDuration.
	Rates           []int
	LatencyDuration time.Duration
	// OutboxRates are the rates (events/s) of the outbox workload's
	// latency rows (application transactions calling orisun_enqueue),
	// each run for LatencyDuration.
	OutboxRates []int
	// ScaleBoundaries boundaries, of which ScaleBusy receive ScaleRate
	// events/s each for LatencyDuration; ScaleIdle is the idle window.
	ScaleBoundaries int
	ScaleBusy       int
	ScaleRate       int
	ScaleIdle       time.Duration
	// StreamMaxBytes is every event stream's byte limit
	// (ORISUN_NATS_EVENT_STREAM_MAX_BYTES). JetStream reserves it in
	// memory for each stream, so the default of a node (512 MiB) leaves
	// room for a few dozen boundaries only; the bench's default fits the
	// scale workload's 1,000.
	StreamMaxBytes int64
	// MsgID gives the node's messages Nats-Msg-Id (ORISUN_NATS_MSG_ID;
	// off by default, as the node's) and the raw loops' (raw_relay,
	// raw_e2e, raw_publish) too, to measure what the header and
	// JetStream's de-duplication window cost.
	MsgID bool
	// ClientCommand is the command line of the api workload's client
	// process, which runs ClientMain. Empty: this executable with
	// arguments "bench api-client" (the orisun binary's hidden
	// sub-command).
	ClientCommand []string
	// ClientCPUProfile, when set, is where the api workload's client
	// process writes a CPU profile of its whole life.
	ClientCPUProfile string
	// RowCPUProfiles, when set, is an empty directory where the process
	// writes a CPU profile over each append row of the api workload,
	// api-<n>.prof for the n-th of them in the report (the api workload's
	// latency rows come after them and have none): what the node's
	// process did during that row alone. The whole run's CPU profile (the
	// command's --cpuprofile) cannot be taken with it.
	RowCPUProfiles string
	// Version is what the report records as the orisun it measured
	// (`orisun bench` gives `orisun version`'s string); empty: not
	// recorded.
	Version string
	// Only limits the run to these workloads (names of Workloads); empty
	// runs all.
	Only []string
	// Progress receives a line per step (nil: none).
	Progress io.Writer
	// Logger receives the node's logs (nil: discarded).
	Logger *slog.Logger
}

// Defaults returns the configuration of `orisun bench` with no flags.
func Defaults() Config {
	return Config{
		Backend:         "sqlite",
		Events:          1_000_000,
		EventBytes:      1024,
		AppendDuration:  5 * time.Second,
		Callers:         []int{1, 16, 64, 256},
		APIBoundaries:   8,
		Rates:           []int{1000, 5000, 20000},
		LatencyDuration: 10 * time.Second,
		OutboxRates:     []int{1000, 5000},
		ScaleBoundaries: 1000,
		ScaleBusy:       5,
		ScaleRate:       100,
		ScaleIdle:       10 * time.Second,
		StreamMaxBytes:  16 << 20,
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: bench: %s: %s", event.ErrInvalid, field, fmt.Sprintf(format, a...))
	}
	switch c.Backend {
	case "sqlite":
	case "postgres":
		if c.PGURL == "" {
			return bad("pg-url", "the postgres backend needs an explicit --pg-url, e.g. postgres://postgres@127.0.0.1:5432/postgres: "+
				"the bench creates a database on that server and loads it, so it never takes the node's ORISUN_PG_URL (possibly a production store)")
		}
		if !strings.HasPrefix(c.PGURL, "postgres://") && !strings.HasPrefix(c.PGURL, "postgresql://") {
			return bad("pg-url", "must be a postgres:// URL (the bench creates a database of its own on that server)")
		}
	default:
		return bad("backend", "%q is not a backend; use sqlite or postgres", c.Backend)
	}
	if c.Events < 1 || c.Events > 100_000_000 {
		return bad("events", "%d is outside 1–100000000", c.Events)
	}
	if c.EventBytes < 16 || c.EventBytes > 512*1024 {
		return bad("event-bytes", "%d is outside 16–524288", c.EventBytes)
	}
	if c.AppendDuration <= 0 || c.AppendDuration > time.Hour {
		return bad("append-duration", "%s is outside (0, 1h]", c.AppendDuration)
	}
	if c.LatencyDuration <= 0 || c.LatencyDuration > time.Hour {
		return bad("duration", "%s is outside (0, 1h]", c.LatencyDuration)
	}
	if len(c.Callers) == 0 {
		return bad("callers", "give at least one caller count")
	}
	for _, n := range c.Callers {
		if n < 1 || n > 10000 {
			return bad("callers", "%d is outside 1–10000", n)
		}
	}
	if c.APIBoundaries < 1 || c.APIBoundaries > 1000 {
		return bad("api-boundaries", "%d is outside 1–1000", c.APIBoundaries)
	}
	if len(c.Rates) == 0 {
		return bad("rates", "give at least one rate")
	}
	for _, r := range c.Rates {
		if r < 1 || r > 1_000_000 {
			return bad("rates", "%d events/s is outside 1–1000000", r)
		}
	}
	for _, r := range c.OutboxRates {
		if r < 1 || r > 1_000_000 {
			return bad("outbox-rates", "%d events/s is outside 1–1000000", r)
		}
	}
	if c.ScaleBoundaries < 1 || c.ScaleBoundaries > 100_000 {
		return bad("scale-boundaries", "%d is outside 1–100000", c.ScaleBoundaries)
	}
	if c.ScaleBusy < 0 || c.ScaleBusy > c.ScaleBoundaries {
		return bad("scale-busy", "%d is outside 0–%d (the scale boundaries)", c.ScaleBusy, c.ScaleBoundaries)
	}
	if c.ScaleRate < 1 || c.ScaleRate > 1_000_000 {
		return bad("scale-rate", "%d events/s is outside 1–1000000", c.ScaleRate)
	}
	if c.ScaleIdle <= 0 || c.ScaleIdle > time.Hour {
		return bad("scale-idle", "%s is outside (0, 1h]", c.ScaleIdle)
	}
	if c.StreamMaxBytes < 1<<20 {
		return bad("stream-max-bytes", "%d is below 1 MiB (1048576)", c.StreamMaxBytes)
	}
	for _, w := range c.Only {
		if !slices.Contains(Workloads, w) {
			return bad("only", "%q is not a workload; use some of %s", w, strings.Join(Workloads, ","))
		}
	}
	if c.RowCPUProfiles != "" {
		if !c.wants("api") {
			return bad("row-cpuprofiles", "the api workload is not among --only %s: no row would be profiled", strings.Join(c.Only, ","))
		}
		// A missing directory is made when the run starts.
		entries, err := os.ReadDir(c.RowCPUProfiles)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return bad("row-cpuprofiles", "%v", err)
		}
		if len(entries) > 0 {
			return bad("row-cpuprofiles", "%s is not empty: an earlier run's profiles would mix with this run's", c.RowCPUProfiles)
		}
	}
	return nil
}

func (c *Config) wants(w string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, w) }

// runner is the state of one run.
type runner struct {
	cfg    Config
	rep    *Report
	node   *orisun.Node
	dir    string
	pgURL  string // the run's own database
	lim    event.Limits
	data   []byte // one event's data
	logger *slog.Logger
	// nc and js are a connection to the node's server, for the stream
	// bytes of each row.
	nc *nats.Conn
	js jetstream.JetStream
	// pgStatsUnread: the report already says that the server's
	// statistics could not be read (noteCheckpoints).
	pgStatsUnread bool
	// pgUnsettled: the report already says that the rows could not start
	// after a VACUUM and a CHECKPOINT (settleNoted).
	pgUnsettled bool
}

// Run runs the workloads and returns the report. The error is non-nil when
// a workload failed or a consistency check did not hold; the report is
// returned as far as it got.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	d := Defaults()
	if cfg.EventBytes == 0 {
		cfg.EventBytes = d.EventBytes
	}
	if len(cfg.Callers) == 0 {
		cfg.Callers = d.Callers
	}
	if cfg.APIBoundaries == 0 {
		cfg.APIBoundaries = d.APIBoundaries
	}
	if cfg.StreamMaxBytes == 0 {
		cfg.StreamMaxBytes = d.StreamMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RowCPUProfiles != "" {
		if err := os.MkdirAll(cfg.RowCPUProfiles, 0o755); err != nil {
			return nil, fmt.Errorf("bench: the directory of the row profiles: %w", err)
		}
	}
	r := &runner{cfg: cfg, logger: cfg.Logger}
	r.rep = newReport(cfg)
	if len(r.rep.Settings.Workloads) == 0 {
		r.rep.Settings.Workloads = Workloads
	}
	r.data = eventData(cfg.EventBytes)
	r.lim = event.Limits{MaxAppendEvents: orisun.MaxAppendEventsDefault, MaxAppendBytes: orisun.MaxAppendBytesDefault,
		MaxEventBytes: orisun.NATSMaxPayloadDefault, EncodedSize: stream.EncodedSize}
	err := r.run(ctx)
	r.rep.Seconds = time.Since(r.rep.Started).Seconds()
	r.rep.LoadEnd = loadAvg()
	if err == nil {
		if failed := r.rep.Failed(); len(failed) > 0 {
			var names []string
			for _, c := range failed {
				names = append(names, fmt.Sprintf("%s (want %d, got %d)", c.Name, c.Want, c.Got))
			}
			err = fmt.Errorf("bench: consistency checks failed: %s", strings.Join(names, "; "))
		}
	}
	return r.rep, err
}

func (r *runner) progress(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "%s  "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, a...)...)
	}
}

func (r *runner) run(ctx context.Context) (err error) {
	cleanup, err := r.prepare(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	backlog := r.cfg.wants("relay") || r.cfg.wants("catchup")
	// Phase 1, before the node runs: the backlog and the limits.
	if err := r.limits(ctx, backlog); err != nil {
		return err
	}
	// Phase 2: the node starts, and its publisher finds the backlog.
	err = r.startNode(ctx, backlog)
	if r.node != nil {
		defer func() {
			if r.nc != nil {
				r.nc.Close()
			}
			if serr := r.node.Stop(); serr != nil && err == nil {
				err = fmt.Errorf("bench: stop node: %w", serr)
			}
		}()
	}
	if err != nil {
		return err
	}
	if backlog && r.cfg.wants("relay") {
		if err := r.rawPublish(ctx); err != nil {
			return err
		}
	} else if backlog {
		if _, err := r.waitPublished(ctx, relayBoundary, uint64(r.cfg.Events), 30*time.Minute); err != nil {
			return err
		}
	}
	if backlog && r.cfg.wants("catchup") {
		if err := r.catchup(ctx); err != nil {
			return err
		}
	}
	latency := func(ctx context.Context) error {
		for _, rate := range r.cfg.Rates {
			if err := r.latency(ctx, rate); err != nil {
				return err
			}
		}
		return nil
	}
	// The workloads on the running node, in this order.
	for _, w := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"append", r.appends},
		{"api", r.api},
		{"latency", latency},
		{"scale", r.scale},
		{"outbox", r.outbox},
	} {
		if !r.cfg.wants(w.name) {
			continue
		}
		if err := w.run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// limits is phase 1, on the store opened directly, so that no publisher
// runs: the backlog, written through the store; then the limits: raw read
// and raw insert on a quiet store, and the raw loops (raw_relay, raw_e2e)
// on a NATS server of their own. The store is open before any limit is
// measured, so its migrations are applied and its tables exist for the
// copies the raw insert makes (a run of --only append used to fail
// there).
func (r *runner) limits(ctx context.Context, backlog bool) (err error) {
	s, err := r.openStore(ctx)
	if err != nil {
		return fmt.Errorf("bench: open store: %w", err)
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: close store: %w", cerr)
		}
	}()
	if backlog {
		if err := r.fillBacklog(ctx, s); err != nil {
			return err
		}
		// The limits and the rows after them start with the backlog's
		// WAL checkpointed and its rows vacuumed (PostgreSQL), not with
		// whichever of them comes first paying for it.
		r.settleNoted(ctx)
		if err := r.rawRead(ctx); err != nil {
			return err
		}
	}
	if r.cfg.wants("append") || r.cfg.wants("api") {
		if err := r.rawInsert(ctx); err != nil {
			return err
		}
	}
	relay, e2e := backlog && r.cfg.wants("relay"), r.cfg.wants("latency")
	if !relay && !e2e {
		return nil
	}
	raw, err := r.startRawServer()
	if err != nil {
		return err
	}
	defer raw.stop()
	ck, err := r.openRawWriter(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ck.close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: raw loops: %w", cerr)
		}
	}()
	if relay {
		if err := r.rawRelay(ctx, s, raw, ck); err != nil {
			return err
		}
	}
	if e2e {
		for _, rate := range r.cfg.Rates {
			if err := r.rawE2E(ctx, s, raw, ck, rate); err != nil {
				return err
			}
		}
	}
	return nil
}

// relayBoundary holds the backlog.
const relayBoundary = "bench_relay"

// prepare makes the run's data directory and, for PostgreSQL, its
// database.
func (r *runner) prepare(ctx context.Context) (func() error, error) {
	var undo []func() error
	cleanup := func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	if r.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "orisun-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: temporary directory: %w", err)
		}
		r.dir = dir
		undo = append(undo, func() error { return os.RemoveAll(dir) })
	} else {
		ents, err := os.ReadDir(r.cfg.Dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.MkdirAll(r.cfg.Dir, 0o750); err != nil {
				return nil, fmt.Errorf("bench: --dir: %w", err)
			}
		case err != nil:
			return nil, fmt.Errorf("bench: --dir: %w", err)
		case len(ents) > 0:
			return nil, fmt.Errorf("%w: bench: --dir %s is not empty: the bench writes only into an empty or new directory, never over existing data",
				event.ErrInvalid, r.cfg.Dir)
		}
		r.dir = r.cfg.Dir
	}
	if r.cfg.Backend == "postgres" {
		url, drop, err := createDatabase(ctx, r.cfg.PGURL)
		if err != nil {
			_ = cleanup()
			return nil, err
		}
		r.pgURL = url
		r.progress("created database %s", dbName(url))
		undo = append(undo, drop)
	}
	return cleanup, nil
}

func (r *runner) startNode(ctx context.Context, backlog bool) error {
	cfg := orisun.Config{
		DataDir:  r.dir,
		Backend:  r.cfg.Backend,
		PGURL:    r.pgURL,
		NATSPort: -1,
		// The status listener on a loopback port of its own, for the
		// rows' fast-batch counts (fastBatchEvents). The metrics keep the
		// node's default cap of boundaries with series of their own: the
		// api and latency rows' boundaries come before the scale
		// workload's thousand, whose cost per boundary stays as a node's.
		HTTPAddr:   "127.0.0.1:0",
		Boundaries: []string{relayBoundary},
		NodeID:     "bench",

		EventStreamMaxBytes: r.cfg.StreamMaxBytes,
		MsgID:               r.cfg.MsgID,
	}
	n, err := orisun.New(cfg, orisun.WithLogger(r.logger))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.rep.Settings.PublishBatch = n.Config().PublishBatch
	r.rep.Settings.PublishWindow = n.Config().PublishWindow
	m := startMeter()
	// Finished by the relay row; on every other return, here (finish is
	// idempotent), so that no sampler outlives the measurement.
	defer m.finish()
	if err := n.Start(ctx); err != nil {
		return fmt.Errorf("bench: start node: %w", err)
	}
	r.node = n
	// Stopped by run, as the node is.
	if r.nc, err = n.ConnectNATS("orisun-bench-meter"); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !backlog || !r.cfg.wants("relay") {
		return nil
	}
	// The relay: the publisher found the backlog at start.
	r.progress("relay: publishing the backlog of %d events", r.cfg.Events)
	published, err := r.waitPublished(ctx, relayBoundary, uint64(r.cfg.Events), 30*time.Minute)
	if err != nil {
		return err
	}
	// The events counted are those the stream holds, not those asked for.
	row := m.row("relay", "backlog to JetStream", int64(published), r.cfg.EventBytes)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.against(r.rep.Limit("raw_relay"))
	row.Note = "from Node.Start (NATS start, lease, stream creation included) to the checkpoint at the last position"
	r.rep.Rows = append(r.rep.Rows, row)
	return nil
}

// fastBatchEvents is how many of boundary's events the node published in
// fast-ingest batches (orisun_published_fast_batch_events_total on its
// /metrics; docs/design.md §5, "Batches"); nil when that cannot be read
// (beyond the node's cap of boundaries with series of their own, say).
func (r *runner) fastBatchEvents(ctx context.Context, boundary string) *uint64 {
	addr := r.node.HTTPAddr()
	if addr == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	prefix := `orisun_published_fast_batch_events_total{boundary="` + boundary + `"} `
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 {
				return nil
			}
			n := uint64(f)
			return &n
		}
	}
	return nil
}

// waitPublished polls the status until the boundary's checkpoint reaches
// want, and returns the stream's last sequence then.
func (r *runner) waitPublished(ctx context.Context, boundary string, want uint64, limit time.Duration) (uint64, error) {
	deadline := time.Now().Add(limit)
	for {
		st, err := r.node.Status(ctx)
		if err != nil {
			return 0, fmt.Errorf("bench: status: %w", err)
		}
		for _, b := range st.Boundaries {
			if b.Name == boundary {
				if b.Published >= want {
					return b.StreamLast, nil
				}
				if time.Now().After(deadline) {
					return 0, fmt.Errorf("bench: boundary %s: published %d of %d after %s (state %s: %s)",
						boundary, b.Published, want, limit, b.State, b.Reason)
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// meter measures wall time, CPU and memory over a workload.
type meter struct {
	start  time.Time
	cpu    time.Duration
	gc     float64 // the collector's CPU seconds at the start
	gcEnd  float64
	cycles int64 // collections at the start
	cyEnd  int64
	peak   atomic.Int64
	heap   atomic.Int64 // the largest live heap seen
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	end    time.Time
	cpuEnd time.Duration
	maxrss int64
	// alloc and allocEnd are heapAllocs at the start and the end.
	alloc, allocEnd uint64
	// busy and busyEnd are machineBusy at the start and the end, busyOK
	// that both were read.
	busy, busyEnd float64
	busyOK        bool
	// waits is threadWaits at the start, waited the time the machine's
	// threads then spent waiting for a CPU until the end (seconds),
	// waitedOK that both were read.
	waits    map[int]threadSched
	waited   float64
	waitedOK bool
}

// startMeter starts measuring a row: this process, and the machine's CPU
// time and threads' waits for a CPU.
func startMeter() *meter { return newMeter(true) }

// startProcessMeter starts measuring this process alone, without the
// machine's threads' waits: the api workload's client process, whose row
// the node's meter measures for the machine (a scan of every thread
// there would be work inside the node's row).
func startProcessMeter() *meter { return newMeter(false) }

func newMeter(waits bool) *meter {
	runtime.GC()
	m := &meter{stop: make(chan struct{})}
	if waits {
		// Read before the row's clock starts: it reads a file per
		// thread on the machine.
		m.waits, m.waitedOK = threadWaits()
	}
	m.start = time.Now()
	m.cpu, _ = cpuTime()
	m.gc, m.cycles = gcCPU()
	m.alloc = heapAllocs()
	m.peak.Store(ResidentBytes())
	m.heap.Store(gctune.HeapLive())
	m.busy, m.busyOK = machineBusy()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *meter) finish() {
	m.once.Do(func() {
		m.end = time.Now()
		m.cpuEnd, m.maxrss = cpuTime()
		m.gcEnd, m.cyEnd = gcCPU()
		m.allocEnd = heapAllocs()
		var ok bool
		m.busyEnd, ok = machineBusy()
		m.busyOK = m.busyOK && ok
		if m.waitedOK {
			var end map[int]threadSched
			end, m.waitedOK = threadWaits()
			m.waited = float64(waitedBetween(m.waits, end)) / 1e9
		}
		close(m.stop)
		m.wg.Wait()
		m.sample()
	})
}

// sample notes the resident set and the live heap if either is the
// largest yet.
func (m *meter) sample() {
	if v := ResidentBytes(); v > m.peak.Load() {
		m.peak.Store(v)
	}
	if v := gctune.HeapLive(); v > m.heap.Load() {
		m.heap.Store(v)
	}
}

// gcCPU is the CPU time the garbage collector has taken in this process,
// in seconds, as the runtime estimates it, and the collections so far.
func gcCPU() (float64, int64) {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	var secs float64
	var cycles int64
	if s[0].Value.Kind() == metrics.KindFloat64 {
		secs = s[0].Value.Float64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		cycles = int64(s[1].Value.Uint64())
	}
	return secs, cycles
}

// heapAllocs is the bytes this process has allocated in the Go heap so
// far (/gc/heap/allocs:bytes).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		return s[0].Value.Uint64()
	}
	return 0
}

// row finishes the meter and returns a row of events over the wall time.
func (m *meter) row(workload, name string, events int64, eventBytes int) Row {
	m.finish()
	secs := m.end.Sub(m.start).Seconds()
	cpu := (m.cpuEnd - m.cpu).Seconds()
	row := Row{Workload: workload, Name: name, Events: events, Seconds: secs,
		CPUSeconds: cpu, GCCPUSeconds: m.gcEnd - m.gc, GCCycles: m.cyEnd - m.cycles, AllocMB: float64(m.allocEnd-m.alloc) / 1e6, RSSMB: float64(m.peak.Load()) / 1e6, MaxRSSMB: float64(m.maxrss) / 1e6, HeapLiveMB: float64(m.heap.Load()) / 1e6}
	if secs > 0 {
		row.EventsPerSec = float64(events) / secs
		row.MBPerSec = float64(events) * float64(eventBytes) / 1e6 / secs
		row.CPUPerSec = cpu / secs
	}
	if m.busyOK {
		row.MachineCPUSeconds = m.busyEnd - m.busy
		if events > 0 {
			row.MachineCPUUsPerEvent = row.MachineCPUSeconds / float64(events) * 1e6
		}
	}
	if m.waitedOK {
		row.MachineWaitSeconds = m.waited
		if events > 0 {
			row.MachineWaitUsPerEvent = m.waited / float64(events) * 1e6
		}
	}
	return row
}

// against sets the row's ratio to a limit.
func (row *Row) against(limit *Row) {
	if limit == nil || limit.EventsPerSec <= 0 {
		return
	}
	row.Limit = limit.Name
	row.LimitPerSec = limit.EventsPerSec
	row.Ratio = row.EventsPerSec / limit.EventsPerSec
}

// also adds the row's ratio to one more limit.
func (row *Row) also(limit *Row) {
	if limit == nil || limit.EventsPerSec <= 0 {
		return
	}
	row.Also = append(row.Also, LimitRatio{Limit: limit.Name, LimitPerSec: limit.EventsPerSec, Ratio: row.EventsPerSec / limit.EventsPerSec})
}

// eventData returns a JSON object of exactly n bytes.
func eventData(n int) []byte {
	const head = `{"customer":"c-000042","amount":1234,"note":"`
	const tail = `"}`
	if n < len(head)+len(tail) {
		b := []byte(`{"p":"`)
		for len(b) < n-2 {
			b = append(b, 'x')
		}
		return append(b, tail...)
	}
	b := append([]byte{}, head...)
	for len(b) < n-len(tail) {
		b = append(b, 'a'+byte(len(b)%26))
	}
	return append(b, tail...)
}

// inputs returns k events of the run's shape with fresh ids.
func (r *runner) inputs(k int) []event.Input {
	in := make([]event.Input, k)
	for i := range in {
		in[i] = event.Input{ID: event.NewID(), Type: "bench.event", Data: r.data, Tags: []string{"bench"}}
	}
	return in
}

// percentile of sorted durations, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

// newReport is the report of a run of cfg before anything is measured:
// the machine, the build, the collector's setting and the settings.
func newReport(cfg Config) *Report {
	gogc := os.Getenv("GOGC")
	return &Report{
		Backend: cfg.Backend, Started: time.Now().UTC(), CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		Version: cfg.Version, GOGC: &gogc,
		LoadStart: loadAvg(),
		Settings: Settings{Events: cfg.Events, EventBytes: cfg.EventBytes, AppendDuration: cfg.AppendDuration,
			LatencyDuration: cfg.LatencyDuration, Rates: cfg.Rates, OutboxRates: cfg.OutboxRates, Callers: cfg.Callers, APIBoundaries: cfg.APIBoundaries, Workloads: cfg.Only,
			ScaleBoundaries: cfg.ScaleBoundaries, ScaleBusy: cfg.ScaleBusy, ScaleRate: cfg.ScaleRate, StreamMaxBytes: cfg.StreamMaxBytes,
			MsgID: cfg.MsgID},
	}
}
