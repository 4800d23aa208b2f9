package orisun_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
)

// enqueuers are application transactions calling orisun_enqueue on
// boundary "default" of a database, as many at once as there are
// goroutines, each transaction with 1 to 3 events of ids of its own; a
// quarter of them roll back. committed holds the ids of the committed ones.
type enqueuers struct {
	mu        sync.Mutex
	committed map[string]bool
	rolled    map[string]bool
	stop      chan struct{}
	wg        sync.WaitGroup
	errs      chan error
}

// startEnqueuers starts n goroutines on url that enqueue until stopped.
func startEnqueuers(t *testing.T, url string, n int) *enqueuers {
	t.Helper()
	e := &enqueuers{committed: map[string]bool{}, rolled: map[string]bool{}, stop: make(chan struct{}), errs: make(chan error, n)}
	for g := range n {
		conn := pgtest.Connect(t, url)
		e.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-e.stop:
					return
				default:
				}
				if err := e.one(conn, g, i); err != nil {
					e.errs <- err
					return
				}
			}
		})
	}
	t.Cleanup(func() { e.wait(t) })
	return e
}

// one runs one application transaction: a row of its own (a temporary
// table) and the enqueue, then the commit or a rollback.
func (e *enqueuers) one(conn *pgx.Conn, g, i int) error {
	ctx := context.Background()
	ids, events := enqueuedEvents(g, i)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var staged int
	if err := tx.QueryRow(ctx, `SELECT orisun_enqueue('default', $1::json)`, events).Scan(&staged); err != nil {
		return err
	}
	if staged != len(ids) {
		return fmt.Errorf("orisun_enqueue staged %d of %d new events", staged, len(ids))
	}
	commit := (g+i)%4 != 3
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if commit {
			e.committed[id] = true
		} else {
			e.rolled[id] = true
		}
	}
	return nil
}

// enqueuedEvents is the JSON array of transaction i of worker g: 1 to 3
// events of type app.enqueued with ids of their own, returned too.
func enqueuedEvents(g, i int) (ids []string, events string) {
	ids = make([]string, 1+(g+i)%3)
	var b strings.Builder
	b.WriteString("[")
	for k := range ids {
		ids[k] = event.NewID()
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%q,"type":"app.enqueued","data":{"g":%d,"i":%d,"k":%d}}`, ids[k], g, i, k)
	}
	b.WriteString("]")
	return ids, b.String()
}

// wait stops the goroutines, fails the test on their errors, and returns
// how many events were committed.
func (e *enqueuers) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
	select {
	case err := <-e.errs:
		t.Fatalf("enqueuer: %v", err)
	default:
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.committed)
}

// checkLog checks the log of boundary "default" on node n: dense, every
// event enqueued and committed exactly once, nothing of a rolled-back
// transaction, and every other event of type "api" (I1, no loss, no
// duplicate). It returns the head.
func (e *enqueuers) checkLog(t *testing.T, n *orisun.Node) uint64 {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	var pos uint64
	for {
		_, evs, err := n.Read(context.Background(), "default", pos, 10_000, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Position != pos+1 {
				t.Fatalf("position %d after %d: the log is not dense (I1)", ev.Position, pos)
			}
			pos = ev.Position
			switch {
			case seen[ev.ID]:
				t.Fatalf("event %s twice in the log (position %d)", ev.ID, ev.Position)
			case e.rolled[ev.ID]:
				t.Fatalf("position %d holds %s of a rolled-back transaction", ev.Position, ev.ID)
			case ev.Type == "app.enqueued" && !e.committed[ev.ID]:
				t.Fatalf("position %d holds %s, which no committed transaction enqueued", ev.Position, ev.ID)
			case ev.Type != "app.enqueued" && ev.Type != "api":
				t.Fatalf("position %d holds an event of type %s", ev.Position, ev.Type)
			}
			seen[ev.ID] = true
		}
	}
	for id := range e.committed {
		if !seen[id] {
			t.Fatalf("committed enqueued event %s is not in the log (of %d committed)", id, len(e.committed))
		}
	}
	return pos
}

// TestEnqueueRelayedExactlyOnce_I1_I4_I5: 16 application transactions at a
// time enqueue events (a quarter roll back) while the node appends through
// its API; the node's mover moves the committed ones into the log and the
// publisher relays them: the log is dense with every committed event once
// and nothing rolled back, the stream holds sequence = position, and a
// subscriber from 0 gets every position once, in order. The node polls once
// a minute (its backstop is longer): only the enqueues' NOTIFY can wake the
// mover in time for the deadline.
func TestEnqueueRelayedExactlyOnce_I1_I4_I5(t *testing.T) {
	n, url := pgNode(t, time.Minute)
	r := newRecorder(0)
	stopSub := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	e := startEnqueuers(t, url, 16)
	for range 20 {
		if _, err := n.Append(context.Background(), "default", events(2, "api", 64), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	committed := e.wait(t)
	start := time.Now()
	st := waitSettled(t, n, 10*time.Second)
	t.Logf("%d enqueued events committed; settled %s after the last commit", committed, time.Since(start))
	b := st.Boundaries[0]
	if b.Staged != 0 || b.Head != uint64(committed+40) {
		t.Fatalf("settled with head %d, %d staged; want head %d (enqueued and appended), nothing staged", b.Head, b.Staged, committed+40)
	}
	head := e.checkLog(t, n)
	if first, last := checkStream(t, n, "default"); first != 1 || last != head {
		t.Fatalf("stream %d..%d, want 1..%d", first, last, head)
	}
	waitDelivered(t, r, head, 10*time.Second)
	if err := stopSub(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, r)
}

// TestEnqueueStatusShowsStagedAndSetAside_I7: while another holder keeps the
// lease (its mover is not running), the node's status counts the
// boundary's staged events and their age, and is not settled. An event
// whose id the API appends meanwhile with other content is set aside when
// the lease comes to this node: the status shows the count and the reason,
// and the events behind it are moved and relayed.
func TestEnqueueStatusShowsStagedAndSetAside_I7(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	other, l := heldElsewhere(t, url)
	n := setup(t, "", func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url })
	conn := pgtest.Connect(t, url)
	conflicting := event.NewID()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT orisun_enqueue('held', $1::json)`,
		fmt.Sprintf(`[{"id":%q,"type":"app","data":1},{"type":"app","data":2},{"type":"app","data":3}]`, conflicting)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	st := testutil.Get(t, n.Status)
	held := boundaryStatus(t, n, "held")
	if held.Staged != 3 || held.StagedSeconds <= 0 || st.Settled {
		t.Fatalf("status with 3 events staged and no mover: staged %d (%.3fs), settled %v", held.Staged, held.StagedSeconds, st.Settled)
	}
	if _, err := n.Append(ctx, "held", []orisun.Input{{ID: conflicting, Type: "api", Data: []byte(`"other"`)}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := other.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 10*time.Second)
	held = boundaryStatus(t, n, "held")
	if held.Head != 3 || held.Staged != 0 || held.SetAside != 1 || !strings.Contains(held.SetAsideReason, conflicting) {
		t.Fatalf("after the move: head %d, staged %d, set aside %d (%q); want head 3, 0 staged, 1 set aside naming %s",
			held.Head, held.Staged, held.SetAside, held.SetAsideReason, conflicting)
	}
	if first, last := checkStream(t, n, "held"); first != 1 || last != 3 {
		t.Fatalf("stream %d..%d, want 1..3", first, last)
	}
}

// heldElsewhere creates boundary "held" in the database at url with its
// lease held for an hour by "elsewhere", a node that never moves staged
// events: what is enqueued there stays staged until the lease is released.
// It returns the store it used (closed when the test ends) and the lease.
func heldElsewhere(t *testing.T, url string) (*postgres.Store, backend.Lease) {
	t.Helper()
	ctx := context.Background()
	other := storetest.Postgres(t, postgres.Config{URL: url})
	if _, _, err := other.CreateBoundary(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	l, err := other.AcquireLease(ctx, "held", "elsewhere", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return other, l
}

// TestEnqueueLeaseMovesMidStream: the lease of a boundary goes from one
// node to another while application transactions keep enqueuing: every
// committed event enters the log once, at dense positions, whichever
// node's mover moved it.
func TestEnqueueLeaseMovesMidStream(t *testing.T) {
	url := pgtest.URL(t)
	pg := func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url }
	a, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, Boundaries: []string{"default"},
		PollInterval: 50 * time.Millisecond, LeaseTTL: 2 * time.Second, Backend: "postgres", PGURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	aStopped := false
	defer func() {
		if !aStopped {
			_ = a.Stop()
		}
	}()
	e := startEnqueuers(t, url, 8)
	time.Sleep(500 * time.Millisecond)
	b := setup(t, "", pg)
	time.Sleep(300 * time.Millisecond)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	aStopped = true
	time.Sleep(time.Second)
	committed := e.wait(t)
	st := waitSettled(t, b, 15*time.Second)
	if bs := st.Boundaries[0]; bs.Head != uint64(committed) || bs.LeaseHolder != st.LeaseHolder {
		t.Fatalf("head %d held by %s; want %d events, the second node holding the lease", bs.Head, bs.LeaseHolder, committed)
	}
	e.checkLog(t, b)
	checkStream(t, b, "default")
	t.Logf("%d events enqueued across the hand-over", committed)
}

// moverChildMain runs a node on the PostgreSQL database of
// ORISUN_TEST_CHILD_PG_URL that moves staged events and reports each move
// on stdout ("moving F L", inside the move's transaction); at the
// ORISUN_TEST_HANG_AT-th move of events it says "hanging F L" and hangs
// there, before the commit, so that the parent can kill it mid-move.
func moverChildMain() int {
	hangAt, _ := strconv.Atoi(os.Getenv("ORISUN_TEST_HANG_AT"))
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	moves := 0
	n, err := orisun.New(orisun.Config{
		DataDir:      os.Getenv("ORISUN_DATA_DIR"),
		NATSPort:     -1,
		Boundaries:   []string{"default"},
		Backend:      "postgres",
		PGURL:        os.Getenv("ORISUN_TEST_CHILD_PG_URL"),
		PollInterval: 20 * time.Millisecond,
		LeaseTTL:     2 * time.Second,
	}, testhooks.Option[orisun.Option](testhooks.Hooks{BeforeMoveCommit: func(_ string, first, last uint64) {
		if first > last {
			return
		}
		moves++
		if moves == hangAt {
			say("hanging %d %d", first, last)
			time.Sleep(time.Hour)
		}
		say("moving %d %d", first, last)
	}}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := n.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	say("ready")
	select {}
}

// TestEnqueueMoverKilled_I1_I4: a real relay process moving staged events
// is killed with SIGKILL inside a move, after its events took their
// positions and before the commit, while application transactions keep
// enqueuing; then PostgreSQL itself crashes and restarts (a server of the
// test's own, stopped in immediate mode). The move is rolled back with the
// process (the head is below its first position), and a node started
// afterwards moves every committed event into the log exactly once, at
// dense positions, and relays it.
func TestEnqueueMoverKilled_I1_I4(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.URL
	// The database is set up (migrations, limits, boundary) by a first
	// node, so that the enqueuers can start before the child leads.
	boot := setup(t, "", func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url })
	if err := boot.Stop(); err != nil {
		t.Fatal(err)
	}
	child := testutil.StartChild(t, "mover child", "mover", "ORISUN_TEST_CHILD_PG_URL="+url, "ORISUN_DATA_DIR="+t.TempDir(),
		"ORISUN_TEST_HANG_AT=5")
	deadline := time.AfterFunc(60*time.Second, func() { child.Signal(syscall.SIGKILL) })
	defer deadline.Stop()
	var e *enqueuers
	var hungFirst uint64
	for hungFirst == 0 {
		line, ok := child.NextLine(t, time.Minute)
		if !ok {
			t.Fatalf("the child ended before the fault point; its output:\n%s", child.Tail(50))
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "ready":
			e = startEnqueuers(t, url, 8)
		case len(f) == 3 && f[0] == "hanging":
			hungFirst, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	// Enqueuing goes on while the move hangs, and after the kill.
	time.Sleep(300 * time.Millisecond)
	if err := child.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := child.NextLine(t, time.Minute); !ok {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	committed := e.wait(t)
	srv.CrashRestart(t)
	ctx := context.Background()
	var head int64
	if err := pgtest.Connect(t, url).QueryRow(ctx, `SELECT head FROM orisun_boundaries WHERE name = 'default'`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	if uint64(head) >= hungFirst {
		t.Fatalf("head %d after the kill: the move hanging at positions from %d committed", head, hungFirst)
	}
	t.Logf("killed inside the move of positions from %d; head %d, %d events committed by the application", hungFirst, head, committed)
	n := setup(t, "", func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url })
	st := waitSettled(t, n, 30*time.Second)
	if h := st.Boundaries[0].Head; h != uint64(committed) {
		t.Fatalf("head %d after the restart, want the %d committed events", h, committed)
	}
	e.checkLog(t, n)
	// The new node has a NATS of its own: its stream starts after the
	// checkpoint the child wrote.
	if _, last := checkStream(t, n, "default"); last != uint64(committed) {
		t.Fatalf("stream up to %d, want up to %d", last, committed)
	}
}

// TestEnqueueLostNotificationCostsAPollInterval_I4: a staged event whose
// notification never came (here: a row put into orisun_staged directly,
// as a lost NOTIFY leaves it) is moved and relayed within a few poll
// intervals (100 ms), found by the node's periodic head check, not after
// the mover's own backstop poll (ORISUN_POLL_BACKSTOP, 30 s by default).
func TestEnqueueLostNotificationCostsAPollInterval_I4(t *testing.T) {
	n, url := pgNode(t, 100*time.Millisecond)
	ctx := context.Background()
	waitSettled(t, n, 10*time.Second)
	// The mover's start-of-term move has run: nothing staged, settled.
	time.Sleep(200 * time.Millisecond)
	id := event.NewID()
	if _, err := pgtest.Connect(t, url).Exec(ctx, `INSERT INTO orisun_staged (call, boundary, id, type, tags, data, enqueued_at)
		VALUES (nextval('orisun_staged_call'), 'default', $1, 'app.lost', '{}', '{"lost":true}', now())`, id); err != nil {
		t.Fatal(err)
	}
	took := testutil.Eventually(t, "the staged event in the log and the stream", 5*time.Second, 10*time.Millisecond, func() bool {
		st, err := n.Status(ctx)
		return err == nil && st.Boundaries[0].Head == 1 && st.Boundaries[0].Published == 1
	})
	t.Logf("moved and published %s after the insert (poll interval 100ms, backstop %s)", took, n.Config().PollBackstop)
	_, evs, err := n.Read(ctx, "default", 0, 10, nil)
	if err != nil || len(evs) != 1 || evs[0].ID != id {
		t.Fatalf("read %v, %v; want the one staged event %s", evs, err, id)
	}
}

// TestEnqueueUnannouncedMovedWithinPollInterval_I4: orisun_enqueue
// announces its commit (NOTIFY orisun_staged) only when it sees no
// committed staged event of the boundary; the mover, after a move that
// found events, scans again every 10 ms for a quiet period (1 s) and then
// waits (docs/outbox.md "When the mover learns of an enqueue"). Each case
// holds the move of a first event before its commit, enqueues a second
// meanwhile in an open transaction (the first is then staged and
// committed: no announcement, which the case checks), lets the move
// commit, and commits the second:
//   - within the quiet period, with a poll interval of 20 s: the mover's
//     own scans find it, within 3 s (not the head check's 20 s);
//   - after the quiet period, the worst case, with a poll interval of
//     500 ms: the node's head check finds it within the poll interval and
//     a move (2.5 s here), not after the mover's backstop poll
//     (ORISUN_POLL_BACKSTOP, 60 s here).
func TestEnqueueUnannouncedMovedWithinPollInterval_I4(t *testing.T) {
	for _, c := range []struct {
		name       string
		poll, idle time.Duration // idle: between the move and the commit
		deadline   time.Duration
	}{
		{"within the quiet period", 20 * time.Second, 0, 3 * time.Second},
		// The quiet period (1 s) and a margin: the mover waits for an
		// announcement when the second commits.
		{"after the quiet period", 500 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) { unannouncedEnqueue(t, c.poll, c.idle, c.deadline) })
	}
}

func unannouncedEnqueue(t *testing.T, poll, idle, deadline time.Duration) {
	url := pgtest.URL(t)
	var holding sync.Mutex
	hold := false
	inMove, release := make(chan struct{}), make(chan struct{})
	n := setup(t, "", func(c *orisun.Config) {
		c.Backend, c.PGURL, c.PollInterval, c.PollBackstop = "postgres", url, poll, time.Minute
	}, testhooks.Option[orisun.Option](testhooks.Hooks{BeforeMoveCommit: func(_ string, first, last uint64) {
		holding.Lock()
		h := hold && first <= last
		hold = hold && !h
		holding.Unlock()
		if h {
			close(inMove)
			<-release
		}
	}}))
	ctx := context.Background()
	waitSettled(t, n, 10*time.Second)
	listener := pgtest.Connect(t, url)
	if _, err := listener.Exec(ctx, `LISTEN orisun_staged`); err != nil {
		t.Fatal(err)
	}
	announced := func(within time.Duration) bool {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := listener.WaitForNotification(wctx)
		return err == nil
	}
	holding.Lock()
	hold = true
	holding.Unlock()
	app := pgtest.Connect(t, url)
	if _, err := app.Exec(ctx, `SELECT orisun_enqueue('default', '[{"type":"app.first","data":1}]')`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inMove:
	case <-time.After(10 * time.Second):
		t.Fatal("the first enqueue was not moved")
	}
	if !announced(5 * time.Second) {
		t.Fatal("the first enqueue, to an empty staging, was not announced")
	}
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := tx.Exec(ctx, `SELECT orisun_enqueue('default', '[{"type":"app.second","data":2}]')`); err != nil {
		t.Fatal(err)
	}
	close(release)
	testutil.Eventually(t, "the first event in the log", 5*time.Second, 5*time.Millisecond, func() bool {
		st, err := n.Status(ctx)
		return err == nil && st.Boundaries[0].Head == 1
	})
	time.Sleep(idle)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	testutil.Eventually(t, "the unannounced event in the log and the stream", deadline, 5*time.Millisecond, func() bool {
		st, err := n.Status(ctx)
		return err == nil && st.Boundaries[0].Head == 2 && st.Boundaries[0].Published == 2
	})
	t.Logf("the unannounced enqueue was moved and published %s after its commit (poll interval %s, backstop %s)",
		time.Since(committed).Round(time.Millisecond), poll, n.Config().PollBackstop)
	if announced(100 * time.Millisecond) {
		t.Fatal("the second enqueue, made while the first was staged and committed, was announced")
	}
	_, evs, err := n.Read(ctx, "default", 0, 10, nil)
	if err != nil || len(evs) != 2 || evs[1].Type != "app.second" {
		t.Fatalf("read %v, %v; want app.first then app.second", evs, err)
	}
}
