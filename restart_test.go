package orisun_test

// The tests of this file show how fast the lease moves when it can (issue
// 17, docs/design.md §9): a node restarted after a crash takes its own dead
// process's lease at once (the data directory's lock proves that process
// gone), a twin with another data directory waits for the lease to expire,
// and a clean stop hands the lease to a standby within a second. They run
// real orisun processes and fault them with signals.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/stream"
)

// restartDeadline is issue 17's bound: a node restarted after a crash has
// its stream at the head within 2 s of the restart.
const restartDeadline = 2 * time.Second

// handOverDeadline is issue 17's bound: after a clean stop (SIGTERM) of the
// leader a standby leads within 1 s, the largest of 10 runs.
const handOverDeadline = time.Second

// nodeIn starts an orisun process on the data directory dir with its NATS
// on port, and env on top.
func nodeIn(t *testing.T, name, dir string, port int, env ...string) *testutil.Process {
	t.Helper()
	return testutil.StartNode(t, name, append([]string{"ORISUN_DATA_DIR=" + dir, "ORISUN_NATS_PORT=" + strconv.Itoa(port),
		"ORISUN_LOG_LEVEL=debug"}, env...)...)
}

// holderOf returns the lease holder name a process logged at its start.
func holderOf(t *testing.T, p *testutil.Process) string {
	t.Helper()
	line := p.WaitLine(t, "orisun started", 60*time.Second)
	for _, f := range strings.Fields(line) {
		if h, ok := strings.CutPrefix(f, "lease_holder="); ok {
			return h
		}
	}
	t.Fatalf("%s's start line names no lease holder: %s", p.Name, line)
	return ""
}

// streamLast returns the last sequence of the boundary's stream on nc's
// server; ok is false while the server or the stream is missing.
func streamLast(nc *nats.Conn, boundary string) (last uint64, ok bool) {
	if nc == nil || !nc.IsConnected() {
		return 0, false
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream.Name(boundary))
	if err != nil {
		return 0, false
	}
	return s.CachedInfo().State.LastSeq, true
}

// natsConn connects to the NATS server at port, reconnecting for ever: it
// follows a node across its restart on the same port.
func natsConn(t *testing.T, port int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.MaxReconnects(-1),
		nats.ReconnectWait(5*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// burst appends 20-event batches from four goroutines through the NATS API
// of one node, with ids of its own, and records every acknowledged
// position and id.
type burst struct {
	acks
	halt func()
}

func startBurst(t *testing.T, c *client.Client) *burst {
	b := &burst{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				in := make([]event.Input, 20)
				for j := range in {
					in[j] = event.Input{ID: event.NewID(), Type: "restart.test", Data: []byte(fmt.Sprintf(`{"w":%d,"i":%d,"j":%d}`, w, i, j))}
				}
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				res, err := c.Append(actx, "default", in, nil)
				acancel()
				b.record(res, in, err)
			}
		})
	}
	b.halt = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(b.halt)
	return b
}

func (b *burst) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.acked)
}

// last is the highest acknowledged position.
func (b *burst) last() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var m uint64
	for p := range b.acked {
		m = max(m, p)
	}
	return m
}

// checkExactlyOnce asserts that every acknowledged event is in the log
// once, at its acknowledged position, and that no id is in it twice; read
// returns the events after a position. It returns the log's ids by
// position.
func checkExactlyOnce(t *testing.T, acked map[uint64]string, read func(after uint64) []event.Event) map[uint64]string {
	t.Helper()
	stored := map[uint64]string{}
	seen := map[string]uint64{}
	for after := uint64(0); ; {
		evs := read(after)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Position != after+1 {
				t.Fatalf("I1: the log has position %d after %d", e.Position, after)
			}
			if p, dup := seen[e.ID]; dup {
				t.Fatalf("event %s is in the log twice, at %d and %d", e.ID, p, e.Position)
			}
			seen[e.ID], stored[e.Position] = e.Position, e.ID
			after = e.Position
		}
	}
	for pos, id := range acked {
		if stored[pos] != id {
			t.Fatalf("acknowledged event lost: position %d should hold %s, holds %q", pos, id, stored[pos])
		}
	}
	return stored
}

// checkStreamMatches reads every message of the boundary's stream on nc
// and asserts sequence = position = the log's event (I2); it returns the
// first and last sequence.
func checkStreamMatches(t *testing.T, nc *nats.Conn, ids map[uint64]string) (first, last uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	s := natstest.Stream(t, js, stream.Name("default"))
	info := s.CachedInfo()
	if info.State.Msgs == 0 {
		return info.State.FirstSeq, info.State.LastSeq
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("stream sequence %d: %v", seq, err)
		}
		md, _ := msg.Metadata()
		pos := msg.Headers().Get(stream.HeaderPosition)
		if md.Sequence.Stream != seq || pos != strconv.FormatUint(seq, 10) || msg.Headers().Get(stream.HeaderEventID) != ids[seq] {
			t.Fatalf("I2: stream sequence %d (read %d) carries position %s, event %s; the log has %s",
				seq, md.Sequence.Stream, pos, msg.Headers().Get(stream.HeaderEventID), ids[seq])
		}
	}
	return info.State.FirstSeq, info.State.LastSeq
}

// TestSQLiteRestartTakesOwnLeaseAtOnce_I2_I4: a SQLite node is killed with
// SIGKILL in the middle of an append burst, within its lease, and started
// again at once on the same data directory. Its stream is at the head
// within 2 s of the restart (issue 17: it took the lease TTL, 10.3 s, when
// the node waited for its own dead lease), the node logs why it took the
// lease early, and every acknowledged event is in the log exactly once and
// in the stream at its position.
//
// The lease TTL is 30 s so that the kill falls within the dead process's
// lease however slow the machine (a SQLite lease's expiry in the row is
// the one written when it was acquired: past it, any restart takes the
// lease at once).
func TestSQLiteRestartTakesOwnLeaseAtOnce_I2_I4(t *testing.T) {
	dir, port := t.TempDir(), testutil.FreePort(t)
	env := []string{"ORISUN_LEASE_TTL=30s", "ORISUN_POLL_INTERVAL=200ms"}
	a := nodeIn(t, "node", dir, port, env...)
	dead := holderOf(t, a)
	c := natstest.Client(t, fmt.Sprintf("nats://127.0.0.1:%d", port), client.Timeout(5*time.Second))
	nc := natsConn(t, port)
	b := startBurst(t, c)
	testutil.Eventually(t, "2,000 events acknowledged and published", 60*time.Second, 5*time.Millisecond, func() bool {
		last, ok := streamLast(nc, "default")
		return b.count() >= 2000 && ok && last > 0
	})
	a.Kill(t) // mid-burst: the appenders are still sending
	b.halt()
	acked := b.count()

	// The dead process's lease, as it stands in the store.
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LeaseHolder(context.Background(), "default")
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != dead {
		t.Fatalf("the lease is held by %q, want the killed process %q", l.Holder, dead)
	}

	restarted := time.Now()
	if !restarted.Before(l.Expires) {
		t.Fatalf("the dead lease expired at %s, before the restart: the test would show nothing", l.Expires)
	}
	a2 := nodeIn(t, "node restarted", dir, port, env...)
	var head uint64
	testutil.Eventually(t, "the stream at the head", 60*time.Second, 2*time.Millisecond, func() bool {
		last, ok := streamLast(nc, "default")
		if !ok {
			return false
		}
		bs, err := c.Boundaries(context.Background())
		if err != nil || len(bs) != 1 {
			return false
		}
		head = bs[0].Head
		return last == head && head >= b.last()
	})
	took := time.Since(restarted)
	t.Logf("SIGKILL mid-burst (%d events acknowledged, %d appends failed, head %d); restarted on the same directory, the stream "+
		"was at the head %s after the restart; the dead process's lease still had %s to run",
		acked, b.failed, head, took.Round(time.Millisecond), l.Expires.Sub(restarted).Round(time.Millisecond))
	if took > restartDeadline {
		t.Errorf("issue 17: the stream reached the head %s after the restart, more than %s", took.Round(time.Millisecond), restartDeadline)
	}
	if !a2.Logged("lease taken over at once", "previous_holder="+dead) {
		t.Errorf("the restarted node did not log that it took the dead process's lease at once:\n%s", a2.Tail(40))
	}
	ids := checkExactlyOnce(t, b.acked, func(after uint64) []event.Event {
		r, err := c.Read(context.Background(), "default", after, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.Events
	})
	first, last := checkStreamMatches(t, nc, ids)
	// The memory stream died with the process and was created again from
	// the checkpoint: empty (first = head+1) when the dead process had
	// published and checkpointed everything before the kill (its backlog
	// went in fast-ingest batches), else holding the rest up to the head.
	if last != head || first > head+1 {
		t.Fatalf("I4: the stream holds %d..%d, the head is %d", first, last, head)
	}
}

// pgProc is an orisun process on PostgreSQL, on a data directory of the
// test's, with its lease holder name.
type pgProc struct {
	*testutil.Process
	dir    string
	port   int
	holder string
}

// The port is picked free, and another process on this shared machine may
// take it before the node binds it: the node is then started again on
// another one, up to three times.
func startPGProc(t *testing.T, name, id, dir, pgURL string, ttl time.Duration) *pgProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := testutil.FreePort(t)
		p := nodeIn(t, name, dir, port, "ORISUN_BACKEND=postgres", "ORISUN_PG_URL="+pgURL, "ORISUN_NODE_ID="+id,
			"ORISUN_LEASE_TTL="+ttl.String(), "ORISUN_POLL_INTERVAL=200ms", "ORISUN_PUBLISH_BATCH=100")
		testutil.Eventually(t, name+" to start or end", 60*time.Second, 5*time.Millisecond, func() bool {
			return p.Logged("orisun started") || p.Exited()
		})
		if p.Logged("orisun started") || attempt == 3 || !p.Logged("ORISUN_NATS_PORT", "address already in use") {
			return &pgProc{Process: p, dir: dir, port: port, holder: holderOf(t, p)}
		}
		t.Logf("%s could not bind NATS port %d, which another process took after it was picked: starting it again", name, port)
	}
}

// leaseOf reads the boundary's lease row.
func leaseOf(t *testing.T, store *postgres.Store) backend.Lease {
	t.Helper()
	return testutil.Get(t, func(ctx context.Context) (backend.Lease, error) { return store.LeaseHolder(ctx, "default") })
}

// TestPostgresRestartSameDirTakesOwnLease_TwinWaits_I2_I4_I6: on
// PostgreSQL, node-a (data directory A) leads under an append burst; its
// twin (the same node id, directory B) stands by beside it and never takes
// the live lease. node-a is killed with SIGKILL mid-burst and started again
// on directory A: it takes its dead process's lease at once, before the
// lease expired, and its stream is at the head within 2 s of the restart
// (issue 17). Then the restarted node-a is killed too, and not restarted:
// the twin takes the lease only once it has expired, in the database's
// clock. Every acknowledged event is in the log exactly once, the twin's
// stream holds every position from the checkpoint it found at its sequence
// (I2, I4), and no term is reused (I6).
func TestPostgresRestartSameDirTakesOwnLease_TwinWaits_I2_I4_I6(t *testing.T) {
	ttl := 6 * time.Second
	pgURL := pgtest.URL(t)
	store := storetest.Postgres(t, postgres.Config{URL: pgURL})
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startPGProc(t, "node-a", "node-a", dirA, pgURL, ttl)
	waitHolder(t, store, "node-a", backend.Lease{}, 30*time.Second)
	before := leaseOf(t, store)
	if before.Holder != a.holder {
		t.Fatalf("the lease is held by %q, want node-a's process %q", before.Holder, a.holder)
	}
	// From now on until node-a dies the lease stays node-a's term: half a
	// TTL and more passes with the twin asking (every TTL/3), and it never
	// takes the live lease.
	var stolen atomic.Pointer[backend.Lease]
	haltWatch := testutil.Every(t, 5*time.Millisecond, func(ctx context.Context) {
		if l, err := store.LeaseHolder(ctx, "default"); err == nil && (l.Holder != a.holder || l.Term != before.Term) {
			stolen.CompareAndSwap(nil, &l)
		}
	})
	twin := startPGProc(t, "node-a's twin", "node-a", dirB, pgURL, ttl)
	if twin.holder == a.holder {
		t.Fatalf("the twin has node-a's holder name %q", twin.holder)
	}

	// The burst, through node-a's NATS API.
	c := natstest.Client(t, fmt.Sprintf("nats://127.0.0.1:%d", a.port), client.Timeout(5*time.Second))
	monitor := checkpointMonitor(t, store)
	b := startBurst(t, c)
	testutil.Eventually(t, "the twin to stand by and 2,000 events to be acknowledged", 60*time.Second, 5*time.Millisecond, func() bool {
		return stolen.Load() != nil || twin.Logged("publisher standby", "lease held by "+a.holder) && b.count() >= 2000
	})
	if stolen.Load() == nil {
		time.Sleep(ttl / 2)
	}
	haltWatch()
	if l := stolen.Load(); l != nil {
		t.Fatalf("with node-a alive the lease went from %+v to %+v: the twin took a live lease", before, *l)
	}

	a.Kill(t)
	b.halt()
	c.Close()
	dead := leaseOf(t, store)
	restarted := time.Now()
	a2 := startPGProc(t, "node-a restarted", "node-a", dirA, pgURL, ttl)
	ncA2 := natsConn(t, a2.port)
	var head uint64
	testutil.Eventually(t, "the restarted node's stream at the head", 60*time.Second, 2*time.Millisecond, func() bool {
		last, ok := streamLast(ncA2, "default")
		h, err := store.Boundary(context.Background(), "default")
		head = h.Head
		return ok && err == nil && last == h.Head && h.Head >= b.last()
	})
	took := time.Since(restarted)
	taken := leaseOf(t, store)
	t.Logf("SIGKILL of node-a mid-burst (%d events acknowledged, head %d); restarted on its directory, its stream was at the head "+
		"%s after the restart; lease term %d → %d", b.count(), head, took.Round(time.Millisecond), dead.Term, taken.Term)
	if took > restartDeadline {
		t.Errorf("issue 17: the stream reached the head %s after the restart, more than %s", took.Round(time.Millisecond), restartDeadline)
	}
	if taken.Holder != a2.holder || taken.Term != dead.Term+1 {
		t.Fatalf("after the restart the lease is %+v, want %q with term %d", taken, a2.holder, dead.Term+1)
	}
	// Acquired (expiry = acquisition + TTL, both in the database's clock)
	// before the dead lease expired: it did not wait.
	if acquiredAt := taken.Expires.Add(-ttl); !acquiredAt.Before(dead.Expires) {
		t.Fatalf("the restarted node acquired the lease at %s, not before the dead lease's expiry %s", acquiredAt, dead.Expires)
	}
	if !a2.Logged("lease taken over at once", "previous_holder="+a.holder) {
		t.Errorf("the restarted node did not log why it took the lease at once:\n%s", a2.Tail(40))
	}
	checkStreamMatches(t, ncA2, checkExactlyOnce(t, b.acked, readPG(t, store)))

	// Now node-a dies for good: its twin waits for the lease to expire.
	a2.Kill(t)
	dead2 := leaseOf(t, store)
	if dead2.Holder != a2.holder {
		t.Fatalf("the lease is %+v, want the restarted node-a's", dead2)
	}
	killed := time.Now()
	waitHolder(t, store, "node-a", dead2, 60*time.Second)
	byTwin := leaseOf(t, store)
	if byTwin.Holder != twin.holder || byTwin.Term != dead2.Term+1 {
		t.Fatalf("after node-a's second death the lease is %+v, want the twin %q with term %d", byTwin, twin.holder, dead2.Term+1)
	}
	if acquiredAt := byTwin.Expires.Add(-ttl); acquiredAt.Before(dead2.Expires) {
		t.Fatalf("the twin acquired node-a's lease at %s, before it expired at %s: a live lease could be stolen the same way",
			acquiredAt, dead2.Expires)
	}
	t.Logf("the twin (another data directory) took the lease %s after node-a's second SIGKILL, after its expiry (TTL %s)",
		time.Since(killed).Round(time.Millisecond), ttl)
	if twin.Logged("lease taken over at once") {
		t.Fatal("the twin logged an early takeover")
	}
	settle(t, store)
	monitor()
	ids := checkExactlyOnce(t, b.acked, readPG(t, store))
	first, last := checkStreamMatches(t, natsConn(t, twin.port), ids)
	if h, _ := store.Boundary(context.Background(), "default"); last != h.Head {
		t.Fatalf("I4: the twin's stream holds %d..%d, the head is %d", first, last, h.Head)
	}
}

// readPG reads the log from the store.
func readPG(t *testing.T, store *postgres.Store) func(after uint64) []event.Event {
	return func(after uint64) []event.Event {
		_, evs, err := store.Read(context.Background(), "default", after, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
}

// TestCleanStopHandsOverWithinASecond_I4_I6: two nodes on one PostgreSQL
// database with the default lease TTL (10 s: a standby retries every 3.3
// s); ten times the leader is stopped with SIGTERM under an append load and
// started again as the standby. The stopping leader releases its lease and
// the release is announced (NOTIFY), so the standby leads within 1 s of
// the SIGTERM in every run, the largest of ten (issue 17: 2.7 s measured
// when the standby learned of the release at its next retry). Each
// takeover is the next term (I6), and in the end every acknowledged
// append is in the store and the last leader's stream holds every
// position from the checkpoint it found on (I4).
func TestCleanStopHandsOverWithinASecond_I4_I6(t *testing.T) {
	pgURL := pgtest.URL(t)
	store := storetest.Postgres(t, postgres.Config{URL: pgURL})
	ttl := 10 * time.Second
	nodes := map[string]*pgProc{}
	dirs := map[string]string{"node-a": t.TempDir(), "node-b": t.TempDir()}
	nodes["node-a"] = startPGProc(t, "node-a", "node-a", dirs["node-a"], pgURL, ttl)
	waitHolder(t, store, "node-a", backend.Lease{}, 30*time.Second)
	nodes["node-b"] = startPGProc(t, "node-b", "node-b", dirs["node-b"], pgURL, ttl)
	app := startAppender(t, store)
	monitor := checkpointMonitor(t, store)
	var took []time.Duration
	leader, standby := "node-a", "node-b"
	for run := 1; run <= 10; run++ {
		sb := nodes[standby]
		testutil.Eventually(t, standby+" to stand by", 60*time.Second, 5*time.Millisecond, func() bool {
			return sb.Logged("publisher standby", "lease held by "+nodes[leader].holder)
		})
		waitCheckpoint(t, store, leader+" to publish", leaseCheckpoint(t, store), 30*time.Second)
		before := leaseOf(t, store)
		if before.Holder != nodes[leader].holder {
			t.Fatalf("run %d: the lease is %+v, want %s's", run, before, leader)
		}
		if err := nodes[leader].Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		var l backend.Lease
		var held, leads time.Duration // since the SIGTERM: the lease row, the publisher's log
		testutil.Eventually(t, standby+" to take the lease and lead", 60*time.Second, time.Millisecond, func() bool {
			if held == 0 {
				if l = leaseOf(t, store); l.Holder == sb.holder {
					held = time.Since(stopped)
				}
			}
			if leads == 0 && sb.Logged("publisher leading") {
				leads = time.Since(stopped)
			}
			return held != 0 && leads != 0
		})
		took = append(took, leads)
		t.Logf("run %d: %s held the lease %s and logged \"publisher leading\" %s after %s's SIGTERM",
			run, standby, held.Round(time.Millisecond), leads.Round(time.Millisecond), leader)
		if l.Term != before.Term+1 {
			t.Fatalf("run %d: %s took term %d after term %d, want the next", run, standby, l.Term, before.Term)
		}
		if code := nodes[leader].Wait().ExitCode(); code != 0 {
			t.Fatalf("run %d: %s exited with %d after SIGTERM", run, leader, code)
		}
		// The old leader comes back as the standby, on its directory.
		nodes[leader] = startPGProc(t, leader, leader, dirs[leader], pgURL, ttl)
		leader, standby = standby, leader
	}
	app.finish(t, store, monitor)
	streamOf(t, &relay{Process: nodes[leader].Process, id: leader, port: nodes[leader].port}, store)
	worst := slices.Max(took)
	var ms []string
	for _, d := range took {
		ms = append(ms, d.Round(time.Millisecond).String())
	}
	t.Logf("SIGTERM of the leader to the standby leading, 10 runs (TTL %s): %s; largest %s",
		ttl, strings.Join(ms, ", "), worst.Round(time.Millisecond))
	if worst >= handOverDeadline {
		t.Errorf("issue 17: the largest hand-over of 10 took %s, not less than %s", worst.Round(time.Millisecond), handOverDeadline)
	}
}

// leaseCheckpoint is the boundary's checkpoint now.
func leaseCheckpoint(t *testing.T, store *postgres.Store) uint64 {
	t.Helper()
	return testutil.Get(t, func(ctx context.Context) (uint64, error) { return store.Checkpoint(ctx, "default") })
}

// TestPostgresNodeLocksItsDataDir: a PostgreSQL node locks its data
// directory as a SQLite node does: a second node on the same directory
// (in the same process too) is refused with the variable and the holder's
// pid, and the lock file names the running node's lease holder, which is
// what lets its next process take its leases at once. Once the first node
// has stopped the directory can be used again, and the new node knows its
// predecessor.
func TestPostgresNodeLocksItsDataDir(t *testing.T) {
	url, dir := pgtest.URL(t), t.TempDir()
	pg := func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url }
	first := setup(t, dir, pg)
	st, err := first.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(dir, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lock), fmt.Sprintf("holder %q\n", st.LeaseHolder)) {
		t.Fatalf("the lock file does not name the running node's lease holder %q:\n%s", st.LeaseHolder, lock)
	}
	cfg := orisun.Config{DataDir: dir, NATSPort: -1, Backend: "postgres", PGURL: url, NodeID: "other"}
	second, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(context.Background())
	want := fmt.Sprintf("ORISUN_DATA_DIR: data directory %q is locked by another orisun process (pid %d)", dir, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a second node on the directory: %v, want an error containing %q", err, want)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	third := setup(t, dir, pg, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	waitSettled(t, third, 30*time.Second)
	if !strings.Contains(logs.String(), "earlier_holders=["+st.LeaseHolder+"]") {
		t.Fatalf("the next node on the directory does not name its predecessor %q:\n%s", st.LeaseHolder, logs.String())
	}
}
