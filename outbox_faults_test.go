package orisun_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/faults"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/outbox"
)

// TestOutboxConcurrentFaultsChecker_I1_I2_I5 is issue 19's run of the
// outbox under load, judged by the fault suite's checker (internal/faults,
// docs/test-plan.md C1–C7): 64 goroutines run application transactions,
// each inserting a row of its own table (app_orders) and calling
// outbox.Append (half of them) or outbox.Enqueue (the other half) for one
// event, a fifth of them rolled back by choice after the call; beside
// them, an API appender (package client, over NATS) appends to the same
// boundary (four appenders) and a consumer subscribes through the client. After a few
// seconds the run settles, and the checker judges the history (acknowledged
// appends at their positions, rolled-back events never stored, the
// consumer's deliveries, the stream) against the store: positions 1..head
// dense, each event once, in its position's order. The enqueued events have
// no position at their commit, so the test checks that the store holds
// exactly the committed events, each once, and that the application's
// table holds one row per committed application event and no other.
func TestOutboxConcurrentFaultsChecker_I1_I2_I5(t *testing.T) {
	const workers = 64
	const runFor = 4 * time.Second
	n, url := pgNode(t, 100*time.Millisecond)
	ctx := context.Background()
	dir := t.TempDir()
	rec, err := faults.NewRecorder(filepath.Join(dir, "test.jsonl"), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if _, err := pgtest.Connect(t, url).Exec(ctx, `CREATE TABLE app_orders (
		id bigserial PRIMARY KEY, event_id uuid NOT NULL UNIQUE, worker int NOT NULL, via text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c := natstest.Client(t, n.NATSURL())
	// Every connection first: the run's clock starts with the work. Opened
	// inside it, 64 connections on a loaded machine took the whole run,
	// and the API appenders, started after them, never appended.
	conns := make([]*pgx.Conn, workers)
	for w := range conns {
		conns[w] = pgtest.Connect(t, url)
	}

	runCtx, stopRun := context.WithTimeout(ctx, runFor)
	defer stopRun()
	var mu sync.Mutex
	committed := map[string]string{} // event id → "append", "enqueue" or "api"
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w, conn := range conns {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				id, via, commit, pos, err := appTransaction(ctx, conn, w, i)
				if err != nil {
					errs <- fmt.Errorf("worker %d, transaction %d: %w", w, i, err)
					return
				}
				switch {
				case !commit:
					rec.Write(faults.Record{Kind: faults.KindAppendFailed, IDs: []string{id}, Err: "rolled back by choice"})
				case via == "append":
					rec.Write(faults.Record{Kind: faults.KindAppendOK, Pos: pos, IDs: []string{id}})
				}
				if commit {
					mu.Lock()
					committed[id] = via
					mu.Unlock()
				}
			}
		})
	}
	for a := range 4 {
		apiRec, err := faults.NewRecorder(filepath.Join(dir, fmt.Sprintf("api%d.jsonl", a)), fmt.Sprintf("api%d", a))
		if err != nil {
			t.Fatal(err)
		}
		defer apiRec.Close()
		wg.Go(func() {
			// Stopped between batches, never inside one: the batch in flight
			// when the run ends is retried (same ids) until acknowledged, so
			// no API append's outcome stays unknown.
			actx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			(&faults.Appender{Rec: apiRec, Batch: 2, Pause: 5 * time.Millisecond,
				Stop: func() bool { return runCtx.Err() != nil },
				Append: func(ctx context.Context, in []event.Input) (event.AppendResult, error) {
					return c.Append(ctx, "default", in, nil)
				}}).Run(actx)
		})
	}
	consRec, err := faults.NewRecorder(filepath.Join(dir, "consumer.jsonl"), "consumer")
	if err != nil {
		t.Fatal(err)
	}
	defer consRec.Close()
	consCtx, stopCons := context.WithCancel(ctx)
	defer stopCons()
	cpFile := filepath.Join(dir, "consumer.checkpoint")
	consDone := make(chan error, 1)
	go func() {
		consDone <- (&faults.Consumer{Name: "consumer", Rec: consRec, CheckpointFile: cpFile,
			Subscribe: func(ctx context.Context, after uint64, opts event.SubscribeOptions, h event.Handler) error {
				return c.Subscribe(ctx, "default", after, h, opts)
			}}).Run(consCtx)
	}()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	start := time.Now()
	st := waitSettled(t, n, 10*time.Second)
	b := st.Boundaries[0]
	t.Logf("head %d, %d staged, settled %s after the run (%d committed application events)", b.Head, b.Staged, time.Since(start), len(committed))
	if b.Staged != 0 {
		t.Fatalf("settled with %d events staged", b.Staged)
	}
	testutil.Eventually(t, fmt.Sprintf("the consumer at the head %d", b.Head), 30*time.Second, 20*time.Millisecond, func() bool {
		_, pos, err := faults.LoadCheckpoint(cpFile)
		return err == nil && pos >= b.Head
	})
	stopCons()
	if err := <-consDone; err != nil {
		t.Fatal(err)
	}
	if _, _, err := faults.ReadStream(ctx, jsOf(t, n), "default", rec, "node"); err != nil {
		t.Fatal(err)
	}

	store, inStore := readStore(t, n)
	h, err := faults.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range h {
		if r.Kind == faults.KindNote {
			t.Logf("%s: %s", r.Proc, r.Note)
		}
		if r.Kind == faults.KindAppendOK && strings.HasPrefix(r.Proc, "api") {
			for _, id := range r.IDs {
				committed[id] = "api"
			}
		}
	}
	vs, stats := faults.Check(h, store, faults.Options{Epoch: b.Epoch, NoDuplicates: true, SavesEach: true})
	for _, v := range vs {
		t.Error(v)
	}
	t.Logf("checker: %+v", stats)
	count := map[string]int{}
	for id, via := range committed {
		count[via]++
		if _, ok := inStore[id]; !ok {
			t.Errorf("committed %s event %s is not in the log", via, id)
		}
	}
	for id, pos := range inStore {
		if committed[id] == "" {
			t.Errorf("position %d holds %s, which nothing committed", pos, id)
		}
	}
	t.Logf("committed: %v; %d positions", count, len(store))
	if count["append"] == 0 || count["enqueue"] == 0 || count["api"] == 0 {
		t.Fatalf("a path appended nothing: %v", count)
	}

	// The application's table: one row per committed application event.
	rows, err := pgtest.Connect(t, url).Query(ctx, `SELECT event_id::text, via FROM app_orders`)
	if err != nil {
		t.Fatal(err)
	}
	table, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var v [2]string
		return v, r.Scan(&v[0], &v[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(table) != count["append"]+count["enqueue"] {
		t.Errorf("app_orders has %d rows, %d application events committed", len(table), count["append"]+count["enqueue"])
	}
	for _, r := range table {
		if committed[r[0]] != r[1] {
			t.Errorf("app_orders row of event %s (%s): committed as %q", r[0], r[1], committed[r[0]])
		}
	}
}

// appTransaction runs one application transaction of worker w on conn: a
// row of app_orders and one event through package outbox (Append for even
// workers, Enqueue for odd ones), then the commit, or a rollback for every
// fifth. It returns the event's id, the path, whether it committed, and
// Append's position.
func appTransaction(ctx context.Context, conn *pgx.Conn, w, i int) (id, via string, commit bool, pos uint64, err error) {
	id = event.NewID()
	via = map[bool]string{true: "append", false: "enqueue"}[w%2 == 0]
	commit = (w+i)%5 != 4
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", "", false, 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO app_orders (event_id, worker, via) VALUES ($1, $2, $3)`, id, w, via); err != nil {
		return "", "", false, 0, err
	}
	in := []event.Input{{ID: id, Type: "app." + via, Tags: []string{fmt.Sprintf("worker:%d", w)},
		Data: json.RawMessage(fmt.Sprintf(`{"worker":%d,"i":%d}`, w, i))}}
	if via == "append" {
		res, err := outbox.Append(ctx, tx, "default", in, nil)
		if err != nil {
			return "", "", false, 0, err
		}
		pos = res.First
	} else if _, err := outbox.Enqueue(ctx, tx, "default", in); err != nil {
		return "", "", false, 0, err
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	return id, via, commit, pos, err
}

// readStore reads boundary "default" of n whole, for the checker, and
// fails the test on an event stored twice; it returns the events and each
// id's position.
func readStore(t *testing.T, n *orisun.Node) ([]faults.Stored, map[string]uint64) {
	t.Helper()
	var store []faults.Stored
	inStore := map[string]uint64{}
	for pos := uint64(0); ; {
		_, evs, err := n.Read(context.Background(), "default", pos, 10_000, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return store, inStore
		}
		for _, e := range evs {
			if p, dup := inStore[e.ID]; dup {
				t.Fatalf("event %s at positions %d and %d", e.ID, p, e.Position)
			}
			inStore[e.ID] = e.Position
			store = append(store, faults.Stored{Pos: e.Position, ID: e.ID})
			pos = e.Position
		}
	}
}

// TestEnqueueInFlightDuringPostgresCrash_I1_I4: application transactions
// enqueue (1 to 3 events each, a quarter rolled back, each held open a few
// milliseconds before its end) while a node moves and relays them, and
// PostgreSQL crashes and restarts (immediate mode) with transactions still
// open and commits in flight; the enqueuers reconnect and go on. Every
// transaction whose COMMIT returned enters the log exactly once, nothing
// of a rolled-back or failed one does, a transaction whose COMMIT's answer
// was lost enters at most once, all of them at dense positions; the fault
// suite's checker judges the store and the node's stream (C1–C4).
func TestEnqueueInFlightDuringPostgresCrash_I1_I4(t *testing.T) {
	srv := pgtest.StartServer(t)
	url := srv.URL
	n := setup(t, "", func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url })
	ctx := context.Background()
	waitSettled(t, n, 30*time.Second)
	dir := t.TempDir()
	rec, err := faults.NewRecorder(filepath.Join(dir, "test.jsonl"), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	var mu sync.Mutex
	outcome := map[string]string{} // id → "committed", "failed" or "unknown"
	var crashed atomic.Bool
	var afterCrash atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					_ = conn.Close(ctx)
				}
			}()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if conn == nil || conn.IsClosed() {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					var cerr error
					conn, cerr = pgx.Connect(cctx, url)
					cancel()
					if cerr != nil {
						conn = nil
						time.Sleep(50 * time.Millisecond)
						continue
					}
				}
				ids, result := crashEnqueue(ctx, conn, g, i)
				mu.Lock()
				for _, id := range ids {
					outcome[id] = result
				}
				mu.Unlock()
				if result == "failed" {
					rec.Write(faults.Record{Kind: faults.KindAppendFailed, IDs: ids, Err: "rolled back or failed before COMMIT"})
				}
				if result == "committed" && crashed.Load() {
					afterCrash.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	srv.CrashRestart(t)
	crashed.Store(true)
	testutil.Eventually(t, "enqueues committed after the restart", 60*time.Second, 20*time.Millisecond, func() bool {
		return afterCrash.Load() >= 20
	})
	close(stop)
	wg.Wait()

	st := waitSettled(t, n, 60*time.Second)
	b := st.Boundaries[0]
	store, inStore := readStore(t, n)
	if _, _, err := faults.ReadStream(ctx, jsOf(t, n), "default", rec, "node"); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	landed := 0
	for id, o := range outcome {
		count[o]++
		_, in := inStore[id]
		switch {
		case o == "committed" && !in:
			t.Errorf("event %s of a committed transaction is not in the log", id)
		case o == "failed" && in:
			t.Errorf("event %s of a failed transaction is in the log at %d", id, inStore[id])
		case o == "unknown" && in:
			landed++
		}
	}
	if len(store) != count["committed"]+landed {
		t.Errorf("the log holds %d events: %d committed and %d of lost COMMIT answers", len(store), count["committed"], landed)
	}
	h, err := faults.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	vs, stats := faults.Check(h, store, faults.Options{Epoch: b.Epoch, NoDuplicates: true})
	for _, v := range vs {
		t.Error(v)
	}
	t.Logf("events by outcome %v (%d of the unknown in the log); head %d; checker %+v", count, landed, b.Head, stats)
	if count["committed"] == 0 || count["failed"] == 0 || afterCrash.Load() == 0 {
		t.Fatalf("the run did not exercise every outcome: %v", count)
	}
}

// crashEnqueue runs one application transaction of worker g on conn:
// orisun_enqueue of 1 to 3 events with ids of its own, a pause of a few
// milliseconds (so that transactions are open when the server crashes),
// then COMMIT, or ROLLBACK for every fourth. It returns the ids and what
// became of them: "committed" (COMMIT returned), "failed" (rolled back, or
// an error before COMMIT was sent: the server aborts the transaction), or
// "unknown" (COMMIT sent, its answer lost).
func crashEnqueue(ctx context.Context, conn *pgx.Conn, g, i int) ([]string, string) {
	ids, events := enqueuedEvents(g, i)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := conn.Begin(tctx)
	if err != nil {
		return ids, "failed"
	}
	if _, err := tx.Exec(tctx, `SELECT orisun_enqueue('default', $1::json)`, events); err != nil {
		_ = tx.Rollback(tctx)
		return ids, "failed"
	}
	time.Sleep(time.Duration(1+(g+i)%5) * time.Millisecond)
	if (g+i)%4 == 3 {
		_ = tx.Rollback(tctx)
		return ids, "failed"
	}
	if err := tx.Commit(tctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return ids, "failed" // the server answered: not committed
		}
		return ids, "unknown"
	}
	return ids, "committed"
}
