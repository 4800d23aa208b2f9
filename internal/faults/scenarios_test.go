package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// spec is one scenario of docs/test-plan.md with its size. The fast subset
// (CI) and the soak run the same code with other sizes.
type spec struct {
	id      string // S1 … S11
	backend string // postgres or sqlite
	// events is the load appended before the faults end.
	events    int
	batch     int
	pauseMS   int
	consumers int
	delayMS   int // the first consumer's handler delay (slow consumer)
	preload   int // events appended before any node starts (PostgreSQL)
	standby   bool
	// liveFirst (PostgreSQL): the first consumer reads with pages of 20
	// and the appender starts only once it went live on the empty stream,
	// so that a slow consumer is outpaced while live (S9).
	liveFirst bool
	ownServer bool
	noDup     bool
	nodeEnv   []string
	// rounds scales the number of faults.
	rounds int
	// fault injects the scenario's faults while the load runs.
	fault func(r *run, s *spec)
	// scale and seed of this run (seed 0: -seed or the clock).
	scale int
	seed  uint64
	// after runs scenario-specific assertions on the history.
	after func(t *testing.T, r *run, h []Record, head uint64)
}

func (s *spec) name() string { return s.id + "-" + s.backend }

func consumerNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "c" + strconv.Itoa(i+1)
	}
	return out
}

// execute runs one scenario end to end and checks it.
func execute(t *testing.T, s *spec) Stats {
	r := newRun(t, s.name(), s.backend, s.seed, s.scale)
	cons := consumerNames(s.consumers)
	r.nodeEnv = append([]string{"ORISUN_LEASE_TTL=2s", "ORISUN_PUBLISH_BATCH=500"}, s.nodeEnv...)
	var app *proc
	stopFile := filepath.Join(r.dir, "stop-append")
	if s.backend == "postgres" {
		srv := ""
		if s.ownServer {
			r.srv = pgtest.StartServer(t)
			srv = r.srv.URL
		}
		r.usePG(srv)
		if s.preload > 0 {
			p := r.startChild("appender", "preload", "ORISUN_FAULTS_BATCH=100", "ORISUN_FAULTS_LIMIT="+strconv.Itoa(s.preload))
			p.expect(wantExit0) // it ends by itself
			r.eventually("the preload", 120*time.Second, p.Exited)
		}
		r.startNode("node-a")
		r.eventually("node-a to lead", 60*time.Second, func() bool { n, _ := r.leader(); return n == "node-a" })
		if s.standby {
			r.startNode("node-b")
		}
		for i, c := range cons {
			env := []string{}
			if i == 0 && s.delayMS > 0 {
				env = append(env, "ORISUN_FAULTS_DELAY_MS="+strconv.Itoa(s.delayMS))
			}
			if i == 0 && s.liveFirst {
				env = append(env, "ORISUN_FAULTS_PAGE=20")
			}
			p := r.startChild("consumer", c, env...)
			if i == 0 && s.liveFirst {
				hist := filepath.Join(r.dir, p.Name+".jsonl")
				r.eventually(c+" to go live on the empty stream", 2*time.Minute, func() bool {
					return historyHas(hist, func(rec Record) bool { return rec.Kind == KindCaughtUp })
				})
			}
		}
		app = r.startChild("appender", "app", "ORISUN_FAULTS_BATCH="+strconv.Itoa(s.batch), "ORISUN_FAULTS_PAUSE_MS="+strconv.Itoa(s.pauseMS))
	} else {
		var cs []string
		for i, c := range cons {
			d := 0
			if i == 0 {
				d = s.delayMS
			}
			cs = append(cs, fmt.Sprintf("%s=%s:%d", c, filepath.Join(r.dir, c+".checkpoint"), d))
		}
		r.nodeEnv = append(r.nodeEnv,
			fmt.Sprintf("ORISUN_FAULT_APPEND=%d:%d:0:%s", s.batch, s.pauseMS, stopFile),
			"ORISUN_FAULT_CONSUMERS="+strings.Join(cs, ","))
		r.startNode("node-a")
	}
	if s.fault != nil {
		s.fault(r, s)
	}
	r.eventually(fmt.Sprintf("%d events appended", s.events), 5*time.Minute, func() bool {
		h, _, ok := r.headAndCheckpoint()
		return ok && h >= uint64(s.events)
	})
	r.heal()
	if app != nil {
		app.stop(30 * time.Second)
	} else if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	head := r.settle(cons, 3*time.Minute)
	// The leader now: while finish stops the nodes, a standby may take
	// the lease released by the leader's clean stop.
	ldr := r.currentLeader()
	st, h := r.finish(Options{NoDuplicates: s.noDup})
	if ldr != "" {
		assertStreamReachesHead(t, h, ldr, head)
	}
	if s.after != nil {
		s.after(t, r, h, head)
	}
	return st
}

// currentLeader is the node whose stream must reach the head at the end.
func (r *run) currentLeader() string {
	if r.backend == "sqlite" {
		return "node-a"
	}
	name, _ := r.leader()
	return name
}

// waitLoad waits until the head reaches n.
func (r *run) waitLoad(n uint64) {
	r.eventually(fmt.Sprintf("head ≥ %d", n), 3*time.Minute, func() bool {
		h, _, ok := r.headAndCheckpoint()
		return ok && h >= n
	})
}

func (r *run) head() uint64 {
	h, _, _ := r.headAndCheckpoint()
	return h
}

// The faults.

// killAfterAck: S2. The node kills itself at the N-th acknowledged batch,
// before its checkpoint; the harness starts it again, rounds times.
func killAfterAck(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		n := 2 + r.rng.IntN(5)
		r.restartToDie("ORISUN_FAULT_KILL_AFTER_ACK="+strconv.Itoa(n),
			fmt.Sprintf("node-a restarted to die at its %d-th acknowledged batch, before the checkpoint", n))
	}
}

// restartToDie restarts node-a with the fault point env, which kills it,
// waits for it to die there, and starts it again.
func (r *run) restartToDie(env, fault string) {
	r.stopNode("node-a")
	r.fault("%s", fault)
	p := r.startNode("node-a", env)
	r.eventually("node-a to reach its fault point", 3*time.Minute, p.Exited)
	r.startNode("node-a")
}

// killMidBatch: S3. The node kills itself when the K-th message of its run
// reaches the stream, with a pipelined batch half acknowledged.
func killMidBatch(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		k := 100 + r.rng.IntN(350)
		if s.backend == "sqlite" {
			// The appender lives in the node: the backlog at a restart
			// is what it appended while the node started.
			k = 20 + r.rng.IntN(150)
		}
		r.restartToDie("ORISUN_FAULT_KILL_AT_SEEN="+strconv.Itoa(k),
			fmt.Sprintf("node-a restarted to die at the %d-th message of its run (PUBLISH_BATCH 500, window 64)", k))
	}
}

// killLeader: S4. SIGKILL the leading node; the standby takes over; the
// killed node comes back as the standby.
func killLeader(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 200)
		name, before := r.leader()
		other := map[string]string{"node-a": "node-b", "node-b": "node-a"}[name]
		_, cpAtKill, _ := r.headAndCheckpoint()
		r.procs[name].signal(syscall.SIGKILL)
		killed := time.Now()
		r.fault("SIGKILL %s, the leader (term %d)", name, before.Term)
		r.procs[name].Wait()
		r.eventually(other+" to take over and publish", 2*time.Minute, func() bool {
			n, l := r.leader()
			_, cp, ok := r.headAndCheckpoint()
			return n == other && l.Term > before.Term && ok && cp > cpAtKill
		})
		took := time.Since(killed)
		r.rec.Write(Record{Kind: KindTakeover, Dur: int64(took), Note: name + " → " + other})
		r.t.Logf("takeover %s → %s in %s (lease TTL 2s)", name, other, took.Round(time.Millisecond))
		r.startNode(name)
	}
}

// stopLeader: S5. In each round the standby is restarted with a fault
// point that stops it (SIGSTOP, sent by itself) at its N-th acknowledged
// batch, before that batch's checkpoint; the leader is stopped cleanly so
// that the standby leads, and started again as the standby. Once the
// stopped node's lease has moved to the other node and the other node
// published, the harness sends SIGCONT: the stopped node's checkpoint write
// of its old term must be refused (assertRefusedAfterStop) and it must step
// down.
func stopLeader(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 100)
		ldr, _ := r.leader()
		sb := map[string]string{"node-a": "node-b", "node-b": "node-a"}[ldr]
		n := 1 + r.rng.IntN(3)
		r.stopNode(sb)
		p := r.startNode(sb, "ORISUN_FAULT_STOP_AT_BATCH="+strconv.Itoa(n))
		r.fault("%s restarted to stop itself (SIGSTOP) at its %d-th acknowledged batch, before the checkpoint; %s stopped cleanly", p.Name, n, ldr)
		r.stopNode(ldr)
		r.eventually(sb+" to lead", 2*time.Minute, func() bool { n, _ := r.leader(); return n == sb })
		r.startNode(ldr)
		hist := filepath.Join(r.dir, p.Name+".jsonl")
		r.eventually(p.Name+" to stop itself", 2*time.Minute, func() bool { return fileHas(hist, "SIGSTOP itself") })
		// The stopped node's term, from its own history (the lease may
		// have moved already).
		var term uint64
		recs, err := ReadFile(hist)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Kind == KindLease {
				term = rec.Term
			}
		}
		r.eventually(ldr+" to take the lease of the stopped node", 2*time.Minute, func() bool {
			n, l := r.leader()
			return n == ldr && l.Term > term
		})
		_, cp, _ := r.headAndCheckpoint()
		r.eventually(ldr+" to publish", 2*time.Minute, func() bool { _, c, ok := r.headAndCheckpoint(); return ok && c > cp })
		// Recorded before the signal: whatever the node sends once it runs
		// again carries a later T0 (assertRefusedAfterStop).
		r.fault("SIGCONT %s after the lease moved from its term %d to %s", p.Name, term, ldr)
		p.signal(syscall.SIGCONT)
		r.stopped = append(r.stopped, p.Name)
		r.eventually(p.Name+" to write its checkpoint after SIGCONT", time.Minute, func() bool { return fileHas(hist, `"kind":"checkpoint"`) })
		r.eventually(p.Name+" to step down (standby in its status)", time.Minute, func() bool {
			st, ok := lastStatus(hist)
			return ok && st.T > time.Now().Add(-time.Second).UnixNano() && st.State == "standby"
		})
	}
}

// stopNode stops a node with SIGTERM once it is up (its first status
// record): a SIGTERM before the node's signal handler exists would kill it
// by the default disposition, which the exit status check rightly calls a
// crash.
func (r *run) stopNode(name string) {
	p := r.procs[name]
	hist := filepath.Join(r.dir, p.Name+".jsonl")
	r.eventually(p.Name+" to be up before it is stopped", 2*time.Minute, func() bool {
		return p.Exited() || historyHas(hist, func(rec Record) bool { return rec.Kind == KindStatus })
	})
	p.stop(30 * time.Second)
}

// historyHas reports whether a history file has a record that ok accepts.
func historyHas(name string, ok func(Record) bool) bool {
	recs, _ := ReadFile(name)
	for _, rec := range recs {
		if ok(rec) {
			return true
		}
	}
	return false
}

// fileHas reports whether a history file contains s.
func fileHas(name, s string) bool {
	b, err := os.ReadFile(name)
	return err == nil && strings.Contains(string(b), s)
}

// terminateBackends: S6. pg_terminate_backend on every orisun connection
// (relays, appenders, consumers).
func terminateBackends(r *run, s *spec) {
	db := pgtest.DatabaseName(r.t, r.pgURL)
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 100)
		pgtest.Exec(r.t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name LIKE 'orisun%'`, db)
		r.fault("pg_terminate_backend on every orisun connection")
	}
}

// crashRestartPG: S7. PostgreSQL stopped with -m immediate and started.
func crashRestartPG(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 200)
		r.fault("PostgreSQL crash-restart (pg_ctl restart -m immediate)")
		r.srv.CrashRestart(r.t)
	}
}

// restartRelay: S8. The relay is killed and started again: its memory
// stream is gone.
func restartRelay(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 200)
		r.procs["node-a"].signal(syscall.SIGKILL)
		r.procs["node-a"].Wait()
		r.fault("SIGKILL node-a and start it again: the memory stream is lost")
		r.startNode("node-a")
	}
}

// rollbackAppenders: S10. Transactions that take the head row and insert an
// event, hold it, and roll back. Their events must never appear; no
// position may be skipped; the status must say it waits.
func rollbackAppenders(r *run, s *spec) {
	ctx := context.Background()
	conn := pgtest.Connect(r.t, r.pgURL)
	for i := 0; i < s.rounds; i++ {
		r.waitLoad(r.head() + 50)
		hold := time.Duration(200+r.rng.IntN(600)) * time.Millisecond
		if i == 0 {
			hold = 1500 * time.Millisecond // long enough for the status to see it twice
		}
		id := event.NewID()
		tx, err := conn.Begin(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		var head int64
		if err := tx.QueryRow(ctx, `UPDATE orisun_boundaries SET head = head + 1 WHERE name = 'default' RETURNING head`).Scan(&head); err != nil {
			r.t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ('default', $1, $2, 'rolled.back', now(), '{}', '{}')`, head, id); err != nil {
			r.t.Fatal(err)
		}
		r.fault("a transaction holds the head row with event %s at position %d for %s, then rolls back", id, head, hold)
		time.Sleep(hold) // the fault's duration, not a synchronisation
		if err := tx.Rollback(ctx); err != nil {
			r.t.Fatal(err)
		}
		r.rec.Write(Record{Kind: KindAppendFailed, IDs: []string{id}, Err: "rolled back"})
	}
}

// killConsumer: S11. A consumer killed and restarted from its saved
// checkpoint many times while it catches up and goes live.
func killConsumer(r *run, s *spec) {
	for i := 0; i < s.rounds; i++ {
		// Strike only once the consumer made progress in this process
		// (it subscribed, caught up a little), at a random moment after.
		at := r.consumerAt("c1")
		r.eventually("c1 to make progress", 2*time.Minute, func() bool { return r.consumerAt("c1") > at })
		when := "at a random moment"
		if i%2 == 1 {
			// Every other kill right after c1 went live: the handover
			// from the store to the stream.
			owner := "c1"
			if s.backend != "postgres" {
				owner = "node-a"
			}
			// Bounded: while the appender outpaces c1 it may not go live
			// at all (then this kill strikes during the catch-up).
			hist := filepath.Join(r.dir, r.procs[owner].Name+".jsonl")
			when = "during the catch-up (c1 did not go live within 10s)"
			for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
				if historyHas(hist, func(rec Record) bool { return rec.Kind == KindCaughtUp && rec.Consumer == "c1" }) {
					when = "right after it went live (the handover)"
					break
				}
			}
		} else {
			time.Sleep(time.Duration(r.rng.IntN(300)) * time.Millisecond) // when to strike, not a synchronisation
		}
		if s.backend == "postgres" {
			r.procs["c1"].signal(syscall.SIGKILL)
			r.procs["c1"].Wait()
			r.fault("SIGKILL consumer c1 at position %d, %s", r.consumerAt("c1"), when)
			r.startChild("consumer", "c1")
		} else {
			// On SQLite the consumers live in the node process (until
			// the NATS client exists): the node dies with them.
			r.procs["node-a"].signal(syscall.SIGKILL)
			r.procs["node-a"].Wait()
			r.fault("SIGKILL node-a with its consumers at c1 position %d, %s", r.consumerAt("c1"), when)
			r.startNode("node-a")
		}
	}
}

// Scenario catalogue, sized by scale (1: CI; more: soak).
func catalogue(scale int) []*spec {
	ev := 500 * scale
	specs := []*spec{
		{id: "S1", backend: "postgres", events: ev, batch: 10, pauseMS: 2, consumers: 2, noDup: true},
		{id: "S2", backend: "postgres", events: ev, batch: 10, pauseMS: 2, consumers: 2, rounds: 2 * scale, fault: killAfterAck},
		{id: "S3", backend: "postgres", events: ev, batch: 10, pauseMS: 2, consumers: 2, preload: 2000, rounds: 2 * scale,
			nodeEnv: []string{"ORISUN_PUBLISH_WINDOW=64"}, fault: killMidBatch},
		{id: "S4", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, standby: true, rounds: scale, fault: killLeader},
		{id: "S5", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, standby: true, rounds: scale, fault: stopLeader,
			after: assertRefusedAfterStop},
		{id: "S6", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, rounds: 3 * scale, fault: terminateBackends},
		{id: "S7", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, ownServer: true, rounds: scale, fault: crashRestartPG},
		{id: "S8", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, rounds: 2 * scale, fault: restartRelay,
			after: assertNoticedLostStream},
		{id: "S9", backend: "postgres", events: ev, batch: 20, pauseMS: 2, consumers: 2, delayMS: 3, liveFirst: true,
			nodeEnv: []string{"ORISUN_NATS_EVENT_STREAM_MAX_MSGS=50"}, after: assertFellBehind},
		{id: "S10", backend: "postgres", events: ev, batch: 5, pauseMS: 5, consumers: 2, rounds: 4 * scale, fault: rollbackAppenders,
			after: assertStatusWaited},
		{id: "S11", backend: "postgres", events: ev, batch: 10, pauseMS: 5, consumers: 2, preload: 1000, rounds: 6 * scale, fault: killConsumer,
			after: reportKilledAtHandover},

		{id: "S1", backend: "sqlite", events: ev, batch: 10, pauseMS: 2, consumers: 2, noDup: true},
		{id: "S2", backend: "sqlite", events: ev, batch: 10, pauseMS: 2, consumers: 2, rounds: 2 * scale, fault: killAfterAck},
		{id: "S3", backend: "sqlite", events: ev, batch: 10, pauseMS: 5, consumers: 2, rounds: 2 * scale,
			nodeEnv: []string{"ORISUN_PUBLISH_WINDOW=64"}, fault: killMidBatch},
		{id: "S8", backend: "sqlite", events: ev, batch: 10, pauseMS: 5, consumers: 2, rounds: 2 * scale, fault: restartRelay,
			after: assertNoticedLostStream},
		{id: "S9", backend: "sqlite", events: ev, batch: 20, pauseMS: 2, consumers: 2, delayMS: 3,
			nodeEnv: []string{"ORISUN_NATS_EVENT_STREAM_MAX_MSGS=50"}, after: reportFellBehind},
		{id: "S11", backend: "sqlite", events: ev, batch: 10, pauseMS: 5, consumers: 2, rounds: 5 * scale, fault: killConsumer,
			after: reportKilledAtHandover},
	}
	for _, s := range specs {
		s.scale = scale
	}
	return specs
}

// assertRefusedAfterStop: S5, C6/C7. Each node stopped past its lease
// wrote, once continued, the checkpoint of its old term, and that write was
// refused as stale; no write of its old term sent after SIGCONT (so after
// the lease had moved) was accepted, and the checker's C7 holds (nothing
// acknowledged after the refusal).
//
// A write is judged by when it was sent (T0), against the harness's SIGCONT
// record, written before the signal. The node's "SIGSTOP itself" record is
// no such line: kill(2) to itself returns before the stop reaches every
// thread, so the checkpointer, writing the previous batch's checkpoint, may
// still send it after that record (seen: sent 0.6 ms after it, taken by the
// store under the good lease, its answer read after SIGCONT). Writes
// stamped before SIGCONT are not judged here (one stamped in the moment
// before the stop took hold may even be sent after SIGCONT); the write the
// stopped node makes after SIGCONT, which the AfterAck fault point holds
// back until then, is the one that tries the fence, every round.
func assertRefusedAfterStop(t *testing.T, r *run, h []Record, head uint64) {
	if len(r.stopped) == 0 {
		t.Fatal("S5: no node was stopped")
	}
	for _, name := range r.stopped {
		var stoppedAt, continuedAt int64
		for _, rec := range h {
			switch {
			case rec.Proc == name && rec.Kind == KindFault && strings.HasPrefix(rec.Note, "SIGSTOP itself"):
				stoppedAt = rec.T
			case rec.Proc == "harness" && rec.Kind == KindFault && strings.HasPrefix(rec.Note, "SIGCONT "+name+" "):
				continuedAt = rec.T
			}
		}
		if stoppedAt == 0 || continuedAt == 0 {
			t.Errorf("C6/C7: %s: stopped itself: %v, continued by the harness: %v", name, stoppedAt != 0, continuedAt != 0)
			continue
		}
		refused := 0
		for _, rec := range h {
			if rec.Proc != name || rec.Kind != KindCheckpoint || rec.T0 <= continuedAt {
				continue
			}
			switch {
			case rec.OK:
				t.Errorf("C6: %s had checkpoint %d (term %d) sent after SIGCONT, past its lease, and accepted", name, rec.Pos, rec.Term)
			case rec.Stale:
				refused++
			}
		}
		if refused == 0 {
			t.Errorf("C6/C7: %s had no checkpoint write refused for its stale term after SIGCONT", name)
		}
		t.Logf("S5: %s: %d checkpoint writes refused for a stale term", name, refused)
	}
}

// assertFellBehind: S9 on PostgreSQL. The slow consumer went live on the
// empty stream with pages of 20, the appender outpaced it and the stream
// keeps 50 messages: it must have gone back to the store (OnFellBehind).
func assertFellBehind(t *testing.T, r *run, h []Record, head uint64) {
	for _, rec := range h {
		if rec.Kind == KindFellBehind && rec.Consumer == "c1" {
			t.Logf("S9: c1 fell behind at %d: %s", rec.Pos, rec.Reason)
			return
		}
	}
	t.Fatal("S9: the slow consumer, live behind a stream of 50 messages, never fell back to the store")
}

// reportFellBehind: S9. How often the consumers went back to the store
// (OnFellBehind). Not asserted: a live subscription buffers up to a page
// (1000) of messages client-side, so at the CI load (500 events) falling
// back depends on timing; C1, C4 and C5 are what S9 asserts.
func reportFellBehind(t *testing.T, r *run, h []Record, head uint64) {
	n := 0
	for _, rec := range h {
		if rec.Kind == KindFellBehind {
			n++
			if n == 1 {
				t.Logf("S9: %s fell behind at %d: %s", rec.Consumer, rec.Pos, rec.Reason)
			}
		}
	}
	t.Logf("S9: %d fall-backs to the store", n)
}

// assertNoticedLostStream: S8. After the first loss of the stream every
// consumer noticed it (fell back to the store or caught up again) where it
// must: on SQLite. On PostgreSQL the counts are reported.
func assertNoticedLostStream(t *testing.T, r *run, h []Record, head uint64) {
	var faultAt int64
	noticed := map[string]int{}
	for _, rec := range h {
		switch {
		case rec.Kind == KindFault && faultAt == 0 && strings.Contains(rec.Note, "memory stream is lost"):
			faultAt = rec.T
		case faultAt != 0 && (rec.Kind == KindFellBehind || rec.Kind == KindCaughtUp):
			noticed[rec.Consumer]++
		}
	}
	if faultAt == 0 {
		t.Fatal("S8: the stream was never lost")
	}
	t.Logf("S8: fall-backs and catch-ups after the loss: %v", noticed)
	if r.backend != "sqlite" {
		// A live subscription on PostgreSQL may ride through the loss:
		// its ordered consumer resumes on the new stream, which starts at
		// checkpoint + 1, and when that is not beyond its next position
		// there is nothing to notice (C1 and C4 judge it).
		return
	}
	// On SQLite the consumers live in the node and start again with it:
	// each must have caught up again.
	for _, c := range consumerNames(2) {
		if noticed[c] == 0 {
			t.Errorf("S8: consumer %s neither fell back nor caught up again after the stream was lost", c)
		}
	}
}

// reportKilledAtHandover: S11. How many kills struck right after the
// consumer went live (every other round tries; whether c1 goes live while
// the appender runs is timing, so it is reported, not asserted).
func reportKilledAtHandover(t *testing.T, r *run, h []Record, head uint64) {
	n := 0
	for _, rec := range h {
		if rec.Kind == KindFault && strings.Contains(rec.Note, "right after it went live") {
			n++
		}
	}
	t.Logf("S11: %d kills right after c1 went live", n)
}

// assertStatusWaited: S10, I7. While a transaction held the head row the
// relay's status said it waits for it.
func assertStatusWaited(t *testing.T, r *run, h []Record, head uint64) {
	for _, rec := range h {
		if rec.Kind == KindStatus && strings.HasPrefix(rec.Reason, "waiting") {
			t.Logf("S10 status: %s", rec.Reason)
			return
		}
	}
	t.Fatal("I7: the status never said it waits while a transaction held the head row")
}
