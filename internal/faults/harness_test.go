package faults

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
)

// The harness: real orisun processes (cmd/orisun built with -tags
// faultinject), a real PostgreSQL (internal/pgtest) or SQLite directory,
// appender and consumer processes (this test binary re-executed as its
// child "appender" or "consumer", testutil.ChildCommand), signals only to
// the processes it started. Each process writes its history to
// dir/*.jsonl; the harness adds its own (faults, heal, settled, checkpoint
// samples, the final streams) and runs Check against the store's final
// content.

var (
	seedFlag  = flag.Uint64("seed", 0, "seed of the fault schedules (0: from the clock; printed by every run)")
	soakFlag  = flag.Duration("soak", 0, "run TestSoak for this long (default: one short scenario)")
	scaleFlag = flag.Int("scale", 1, "size of each scenario's load and fault count (TestScenarios; TestSoak uses 2 unless set)")
	summaryTo = flag.String("soak-summary", "", "also write TestSoak's summary to this file")
	keepTo    = flag.String("keep", "", "copy each run's histories (*.jsonl) to DIR/<scenario>-<seed>/")
)

func TestMain(m *testing.M) {
	testutil.Children(map[string]func() int{
		"appender": func() int { return childMain("appender") },
		"consumer": func() int { return childMain("consumer") },
	})
	testutil.Main(m)
}

func seedFor(t *testing.T) uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return uint64(time.Now().UnixNano())
}

// proc is one process the harness started.
type proc struct {
	*testutil.Process
	mu sync.Mutex
	// want is how the process must end: "" (it runs until the harness
	// stops it: any exit before is a crash), wantKilled (the harness or
	// its own fault point sent SIGKILL) or wantExit0 (stopped with
	// SIGTERM, or a child that ends by itself).
	want string
}

const (
	wantKilled = "killed by SIGKILL"
	wantExit0  = "exit status 0"
)

func (p *proc) expect(want string) {
	p.mu.Lock()
	p.want = want
	p.mu.Unlock()
}

// endProblem says what is wrong with how an exited process ended ("" if
// nothing): a node killed must have died by SIGKILL, one stopped with
// SIGTERM must have exited 0, and nothing may die unasked.
func (p *proc) endProblem() string {
	p.mu.Lock()
	want := p.want
	p.mu.Unlock()
	if !p.Exited() {
		return "" // still running: the harness's cleanup kills it
	}
	ps := p.Cmd.ProcessState
	if ps == nil {
		return ""
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch want {
	case wantKilled:
		if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return ""
		}
	case wantExit0:
		if ws.Exited() && ws.ExitStatus() == 0 {
			return ""
		}
	default:
		return fmt.Sprintf("%s ended unasked (%s)", p.Name, ps)
	}
	return fmt.Sprintf("%s ended with %s, want %s", p.Name, ps, want)
}

// signal sends sig to this process if it still runs; never anything else.
func (p *proc) signal(sig syscall.Signal) {
	if !p.Exited() {
		if sig == syscall.SIGKILL {
			p.expect(wantKilled)
		}
		p.Signal(sig)
	}
}

// stop ends the process: SIGTERM, then SIGKILL after the grace (still
// wantExit0: a hang fails the run).
func (p *proc) stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	p.expect(wantExit0)
	p.Stop(grace)
}

// run is one scenario run.
type run struct {
	t        *testing.T
	name     string
	seed     uint64
	rng      *rand.Rand
	backend  string
	dir      string // histories
	data     string // SQLite data dir (one node)
	pgURL    string
	rec      *Recorder
	pg       *postgres.Store // the harness's own view of PostgreSQL
	srv      *pgtest.Server  // a server of the run's own (S7)
	nodeEnv  []string
	ports    map[string]int
	gen      map[string]int
	procs    map[string]*proc // current process of each name
	all      []*proc
	schedMu  sync.Mutex
	schedule []string
	start    time.Time
	stopMon  func()
	// stopped: the processes S5 stopped past their lease.
	stopped []string
}

func newRun(t *testing.T, name, backendName string, seed uint64, scale int) *run {
	if seed == 0 {
		seed = seedFor(t)
	}
	r := &run{t: t, name: name, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x0715)), backend: backendName,
		dir: t.TempDir(), ports: map[string]int{}, gen: map[string]int{}, procs: map[string]*proc{}, start: time.Now()}
	var err error
	r.rec, err = NewRecorder(filepath.Join(r.dir, "harness.jsonl"), "harness")
	if err != nil {
		t.Fatal(err)
	}
	replay := fmt.Sprintf("scripts/test -run 'TestScenarios/%s$' ./internal/faults -args -seed %d -scale %d", name, seed, scale)
	t.Logf("%s: seed %d (replay: %s)", name, seed, replay)
	// Each process's own cleanup (testutil.StartProcess) has ended it, and
	// logged its last output if the run failed, before this one runs.
	t.Cleanup(func() {
		if r.stopMon != nil {
			r.stopMon()
		}
		if *keepTo != "" || t.Failed() {
			r.keep() // a failed run's histories are always kept
		}
		if t.Failed() {
			r.schedMu.Lock()
			t.Logf("FAILED %s: seed %d, replay: %s\nfault schedule:\n  %s", name, seed, replay, strings.Join(r.schedule, "\n  "))
			r.schedMu.Unlock()
		}
		r.rec.Close()
	})
	return r
}

// fault records an injected fault in the schedule and the history.
func (r *run) fault(format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	r.schedMu.Lock()
	r.schedule = append(r.schedule, fmt.Sprintf("+%s %s", time.Since(r.start).Round(time.Millisecond), note))
	r.schedMu.Unlock()
	r.rec.Write(Record{Kind: KindFault, Note: note})
}

// usePG creates the run's database (on srvURL's server when given) and the
// harness's own store on it, and starts the checkpoint monitor.
func (r *run) usePG(srvURL string) {
	if srvURL != "" {
		r.t.Setenv(pgtest.EnvURL, srvURL)
	}
	r.pgURL = pgtest.URL(r.t)
	s := storetest.Postgres(r.t, postgres.Config{URL: r.pgURL})
	r.pg = s
	if _, _, err := s.CreateBoundary(context.Background(), "default"); err != nil {
		r.t.Fatal(err)
	}
	r.installAudit()
	var last uint64
	r.stopMon = testutil.Every(r.t, 50*time.Millisecond, func(context.Context) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cp, err := s.Checkpoint(ctx, "default")
		cancel()
		if err == nil && cp != last {
			r.rec.Write(Record{Kind: KindSeen, Pos: cp})
			last = cp
		}
	})
}

// auditSQL: a test-only table and trigger in the run's database that
// record every change of the lease row's checkpoint column, in the order
// the row was updated (the row lock orders the updates, and the id is
// taken under it). The checker reads it at the end (CheckAudit): C6 on
// every write, not on samples.
const auditSQL = `
CREATE TABLE checkpoint_audit (
    id   bigserial   PRIMARY KEY,
    old  bigint      NOT NULL,
    new  bigint      NOT NULL,
    term bigint      NOT NULL,
    at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION checkpoint_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO checkpoint_audit (old, new, term) VALUES (OLD.checkpoint, NEW.checkpoint, NEW.term);
    RETURN NULL;
END $$;
CREATE TRIGGER checkpoint_audit_trg AFTER UPDATE OF checkpoint ON orisun_leases
    FOR EACH ROW WHEN (OLD.checkpoint IS DISTINCT FROM NEW.checkpoint) EXECUTE FUNCTION checkpoint_audit_fn();
`

func (r *run) installAudit() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := pgtest.Connect(r.t, r.pgURL)
	if _, err := conn.Exec(ctx, auditSQL); err != nil {
		r.t.Fatalf("install the checkpoint audit trigger: %v", err)
	}
}

// readAudit reads the audit of the checkpoint column (PostgreSQL).
func (r *run) readAudit() []AuditRow {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := pgtest.Connect(r.t, r.pgURL)
	rows, err := conn.Query(ctx, `SELECT id, old, new, term FROM checkpoint_audit ORDER BY id`)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []AuditRow
	for rows.Next() {
		var a AuditRow
		var o, n, term int64
		if err := rows.Scan(&a.ID, &o, &n, &term); err != nil {
			r.t.Fatal(err)
		}
		a.Old, a.New, a.Term = uint64(o), uint64(n), uint64(term)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// spawn starts a process named name (a new generation each time).
func (r *run) spawn(name string, c testutil.Command) *proc {
	c.Name = fmt.Sprintf("%s#%d", name, r.gen[name])
	c.KeepLines = 1000 // a node logs at debug level for minutes
	p := &proc{Process: testutil.StartProcess(r.t, c)}
	r.procs[name] = p
	r.all = append(r.all, p)
	return p
}

func (r *run) historyEnv(name string) []string {
	r.gen[name]++
	proc := fmt.Sprintf("%s#%d", name, r.gen[name])
	return []string{"ORISUN_FAULT_HISTORY=" + filepath.Join(r.dir, proc+".jsonl"), "ORISUN_FAULT_PROC=" + proc}
}

// startNode starts (or restarts) orisun node name with extra environment.
func (r *run) startNode(name string, extra ...string) *proc {
	if r.ports[name] == 0 {
		r.ports[name] = testutil.FreePort(r.t)
	}
	data := filepath.Join(r.dir, "data-"+name)
	if r.backend == "sqlite" {
		r.data = data
	}
	env := []string{"ORISUN_NODE_ID=" + name, "ORISUN_DATA_DIR=" + data,
		"ORISUN_NATS_PORT=" + strconv.Itoa(r.ports[name]), "ORISUN_POLL_INTERVAL=200ms", "ORISUN_LOG_LEVEL=debug",
		"ORISUN_FAULT_STATUS=250ms", "ORISUN_HTTP_ADDR=127.0.0.1:0"}
	if r.backend == "postgres" {
		env = append(env, "ORISUN_BACKEND=postgres", "ORISUN_PG_URL="+r.pgURL)
	}
	env = append(env, r.nodeEnv...)
	env = append(env, r.historyEnv(name)...)
	env = append(env, extra...)
	p := r.spawn(name, testutil.Command{Path: testutil.OrisunBinary(r.t, "faultinject"), Env: env})
	for _, e := range extra {
		if strings.HasPrefix(e, "ORISUN_FAULT_KILL_") {
			p.expect(wantKilled) // its own fault point kills it
		}
	}
	return p
}

func (r *run) natsURLs() string {
	var parts []string
	for name, port := range r.ports {
		parts = append(parts, fmt.Sprintf("%s=nats://127.0.0.1:%d", name, port))
	}
	return strings.Join(parts, ",")
}

// startChild starts this test binary as an appender or consumer (PostgreSQL).
func (r *run) startChild(kind, name string, extra ...string) *proc {
	env := append([]string{"ORISUN_FAULTS_NAME=" + name,
		"ORISUN_FAULTS_PG_URL=" + r.pgURL, "ORISUN_FAULTS_NODES=" + r.natsURLs(),
		"ORISUN_FAULTS_CHECKPOINT=" + filepath.Join(r.dir, name+".checkpoint")}, r.historyEnv(name)...)
	return r.spawn(name, testutil.ChildCommand(kind, append(env, extra...)...))
}

// eventually polls ok until it holds or the deadline passes.
func (r *run) eventually(what string, timeout time.Duration, ok func() bool) time.Duration {
	r.t.Helper()
	return testutil.Eventually(r.t, what, timeout, 50*time.Millisecond, ok)
}

// leader returns the node name holding the lease (PostgreSQL).
func (r *run) leader() (string, backend.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := r.pg.LeaseHolder(ctx, "default")
	if err != nil {
		return "", l
	}
	name, _, _ := strings.Cut(l.Holder, "#")
	return name, l
}

// headAndCheckpoint reads the boundary's head and checkpoint: from
// PostgreSQL, or from the SQLite node's latest status record.
func (r *run) headAndCheckpoint() (head, cp uint64, ok bool) {
	if r.backend == "postgres" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err1 := r.pg.Checkpoint(ctx, "default")
		b, err2 := r.pg.Boundary(ctx, "default")
		return b.Head, c, err1 == nil && err2 == nil
	}
	p := r.procs["node-a"]
	if p == nil {
		return 0, 0, false
	}
	st, found := lastStatus(filepath.Join(r.dir, p.Name+".jsonl"))
	if !found || !strings.HasPrefix(st.Proc, p.Name) {
		return 0, 0, false
	}
	return st.Head, st.Pos, true
}

// lastStatus returns the last status record of a history file.
func lastStatus(name string) (Record, bool) {
	f, err := os.Open(name)
	if err != nil {
		return Record{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Record{}, false
	}
	off := max(fi.Size()-256<<10, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	lines := bytes.Split(b, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if !bytes.Contains(lines[i], []byte(`"kind":"status"`)) {
			continue
		}
		recs, err := parseLine(lines[i])
		if err == nil {
			return recs, true
		}
	}
	return Record{}, false
}

// consumerAt returns the position a consumer saved.
func (r *run) consumerAt(name string) uint64 {
	_, pos, _ := LoadCheckpoint(filepath.Join(r.dir, name+".checkpoint"))
	return pos
}

// heal marks the end of the faults: from here C8 measures the lag.
func (r *run) heal() {
	r.schedMu.Lock()
	r.schedule = append(r.schedule, fmt.Sprintf("+%s healed", time.Since(r.start).Round(time.Millisecond)))
	r.schedMu.Unlock()
	r.rec.Write(Record{Kind: KindHeal})
}

// settle waits until the checkpoint is the head and every consumer has it.
func (r *run) settle(consumers []string, timeout time.Duration) uint64 {
	r.t.Helper()
	var head uint64
	r.eventually("settled (checkpoint = head, every consumer at the head)", timeout, func() bool {
		h, cp, ok := r.headAndCheckpoint()
		if !ok || cp != h {
			return false
		}
		for _, c := range consumers {
			if r.consumerAt(c) != h {
				return false
			}
		}
		// The head again: nothing was appended meanwhile.
		h2, cp2, ok := r.headAndCheckpoint()
		head = h
		return ok && h2 == h && cp2 == cp
	})
	r.rec.Write(Record{Kind: KindSettled, Head: head})
	return head
}

// readStreams records the final stream of each running node.
func (r *run) readStreams() map[string][2]uint64 {
	out := map[string][2]uint64{}
	for name, port := range r.ports {
		p := r.procs[name]
		if p == nil || p.Exited() {
			continue
		}
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
		if err != nil {
			r.t.Fatalf("connect to %s: %v", name, err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		first, last, err := ReadStream(ctx, js, "default", r.rec, name)
		cancel()
		nc.Close()
		if err != nil {
			r.t.Fatalf("read the stream of %s: %v", name, err)
		}
		out[name] = [2]uint64{first, last}
	}
	return out
}

// storeContent reads the store's final content and epoch.
func (r *run) storeContent() ([]Stored, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rd backend.Reader
	if r.backend == "postgres" {
		rd = r.pg
	} else {
		s, err := sqlite.Open(ctx, sqlite.Config{Dir: r.data})
		if err != nil {
			r.t.Fatalf("open the SQLite store after the run: %v", err)
		}
		defer s.Close()
		rd = s
	}
	var out []Stored
	var epoch string
	for after := uint64(0); ; {
		ep, evs, err := rd.Read(ctx, "default", after, 5000, nil)
		if err != nil {
			r.t.Fatal(err)
		}
		epoch = ep
		if len(evs) == 0 {
			return out, epoch
		}
		for _, e := range evs {
			out = append(out, Stored{Pos: e.Position, ID: e.ID})
		}
		after = evs[len(evs)-1].Position
	}
}

// check stops every process, reads the store and the histories and runs
// the checker; a process that ended otherwise than the harness asked is a
// failure of the run (item 5 of the review: exit statuses).
func (r *run) check(o Options) ([]Violation, Stats, []Record) {
	r.t.Helper()
	for _, p := range r.procs {
		p.stop(30 * time.Second)
	}
	if r.stopMon != nil {
		r.stopMon()
	}
	for _, p := range r.all {
		if msg := p.endProblem(); msg != "" {
			r.t.Errorf("exit status: %s", msg)
		}
	}
	store, epoch := r.storeContent()
	h, err := ReadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	o.Epoch = epoch
	o.SavesEach = true
	vs, st := Check(h, store, o)
	if r.backend == "postgres" {
		audit := r.readAudit()
		vs = append(vs, CheckAudit(audit, uint64(len(store)))...)
		if len(audit) == 0 && len(store) > 0 {
			vs = append(vs, Violation{Check: "C6", Msg: "the checkpoint audit recorded no change in a run that stored events"})
		}
		r.t.Logf("checkpoint audit: %d changes", len(audit))
	}
	return vs, st, h
}

// finish stops every process, reads the store and the histories, runs the
// checker and fails on any violation. It returns the statistics.
func (r *run) finish(o Options) (Stats, []Record) {
	r.t.Helper()
	streams := r.readStreams()
	vs, st, h := r.check(o)
	r.t.Logf("%s: %d events, %d deliveries, %d duplicates, %d subscriptions, %d faults, max takeover %s, lag after heal %s, streams %v",
		r.name, st.Events, st.Deliveries, st.Duplicates, st.Subscriptions, st.Faults,
		st.MaxTakeover.Round(time.Millisecond), st.MaxLagAfterHeal.Round(time.Millisecond), streams)
	for _, v := range vs {
		r.t.Errorf("%s", v)
	}
	if len(vs) > 0 {
		r.t.FailNow()
	}
	return st, h
}

// assertStreamReachesHead: the leading node's stream ends at the head, with
// no gap (S3, I4).
func assertStreamReachesHead(t *testing.T, h []Record, node string, head uint64) {
	t.Helper()
	var last uint64
	for _, r := range h {
		if r.Kind == KindStream && r.Node == node {
			last = r.Seq
		}
	}
	if last != head {
		t.Fatalf("I4: %s's stream ends at %d, the head is %d", node, last, head)
	}
}

// keep copies the run's histories for a look afterwards: to -keep, or,
// for a failed run without -keep, under the system's temporary directory.
func (r *run) keep() {
	base := *keepTo
	if base == "" {
		base = filepath.Join(os.TempDir(), "orisun-faults-failed")
	}
	dst := filepath.Join(base, fmt.Sprintf("%s-%d", r.name, r.seed))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		r.t.Log(err)
		return
	}
	files, _ := filepath.Glob(filepath.Join(r.dir, "*.jsonl"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644)
		}
	}
	r.t.Logf("histories kept in %s", dst)
}
