package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/migrations"
)

// setup opens a store on a fresh database (or on cfg.URL) and closes it at
// the end of the test.
func setup(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = pgtest.URL(t)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	backendtest.Closed(t, s)
	return s
}

// TestConformance runs the suite of the store seam (backendtest.RunAll),
// with stall (the head row held) as Features.Stall.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, openGroups, func(t *testing.T, s backend.Store) backend.Store { return setup(t, Config{URL: s.(*Store).cfg.URL}) }, features)
}

// openGroups is setup with the group settings g (backendtest.RunAll and
// BenchAppend).
func openGroups(t testing.TB, g backendtest.Groups) backend.Store {
	return setup(t, Config{GroupDelay: g.Delay, GroupMaxEvents: g.MaxEvents})
}

// --- helpers ---------------------------------------------------------------

// connect opens a raw connection to the store's database, closed at the end
// of the test.
func connect(t testing.TB, s *Store) *pgx.Conn {
	t.Helper()
	return pgtest.Connect(t, s.cfg.URL)
}

// lockWaiters counts the backends of the store's database waiting for a
// lock (a head row, here).
func lockWaiters(t testing.TB, s *Store) int {
	t.Helper()
	var n int
	err := s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holdHead is an appender that holds its transaction open: a raw
// transaction that takes the boundary's head row the way the store does and,
// when n > 0, draws n positions and inserts events there. It returns the
// positions it drew and commit, which ends the transaction.
func holdHead(t testing.TB, s *Store, boundary string, n int) (first, last int64, commit func()) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, s)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	commit = func() {
		once.Do(func() {
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("commit the held transaction: %v", err)
			}
		})
	}
	t.Cleanup(func() { once.Do(func() { _ = tx.Rollback(ctx) }) })
	if _, err := tx.Exec(ctx, sqlLockHead, boundary); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return 0, 0, commit
	}
	var epoch string
	if err := tx.QueryRow(ctx, `UPDATE orisun_boundaries SET head = head + $1 WHERE name = $2 RETURNING head, epoch`,
		n, boundary).Scan(&last, &epoch); err != nil {
		t.Fatal(err)
	}
	first = last - int64(n) + 1
	for p := first; p <= last; p++ {
		if _, err := tx.Exec(ctx, `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ($1, $2, $3, 'held.event', now(), '{}', '{}')`, boundary, p, event.NewID()); err != nil {
			t.Fatal(err)
		}
	}
	return first, last, commit
}

// stall holds boundary's head row and sends one append of n events, which a
// worker takes into a group and which then waits for the row. When stall
// returns, every further append to boundary waits in the queue,
// deterministically. release commits the holder; first reports the stalled
// append's outcome.
func stall(t *testing.T, s *Store, boundary string, n int) (release func(), first <-chan backendtest.Outcome) {
	t.Helper()
	_, _, release = holdHead(t, s, boundary, 0)
	before := s.groups.Load()
	waitersBefore := lockWaiters(t, s)
	first = backendtest.AppendAsync(context.Background(), s, boundary, backendtest.Prepared(t, boundary, n), nil)
	testutil.Eventually(t, "the worker waits for the head row", 20*time.Second, 2*time.Millisecond, func() bool {
		return s.groups.Load() == before+1 && lockWaiters(t, s) > waitersBefore
	})
	return release, first
}

// --- I1: dense, commit-ordered positions -----------------------------------

// cursorReader is the reader of the I1 tests, shared by the test and its
// negative control so that the control shows this very check biting: it
// follows a log with a cursor, as the publisher does (everything after the
// last position it saw, in order), and reports the first position that is
// not cursor+1. After a gap it keeps following from the higher position,
// as a reader that trusts its cursor would, so the caller can show that
// the skipped position never comes.
type cursorReader struct {
	cursor uint64
	seen   []uint64
	gap    error // the first gap seen
}

func positions(events []event.Event) []uint64 {
	out := make([]uint64, len(events))
	for i, e := range events {
		out[i] = e.Position
	}
	return out
}

// take records a page of positions read after r.cursor.
func (r *cursorReader) take(page []uint64) {
	for _, p := range page {
		if p != r.cursor+1 && r.gap == nil {
			r.gap = fmt.Errorf("I1: the reader saw position %d right after %d: position %d was skipped", p, r.cursor, r.cursor+1)
		}
		r.cursor = p
		r.seen = append(r.seen, p)
	}
}

// TestNaiveSequenceSkips_I1NegativeControl is the negative control of
// TestReverseCommitOrder_I1: with a bigserial position and no head row, a
// cursor reader does skip an event when two transactions commit in reverse
// order of their sequence numbers. If this test ever fails, the interleaving
// below no longer bites and the positive test proves nothing.
func TestNaiveSequenceSkips_I1NegativeControl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.URL(t)
	reader, tx1c, tx2c := pgtest.Connect(t, dbURL), pgtest.Connect(t, dbURL), pgtest.Connect(t, dbURL)
	if _, err := reader.Exec(ctx, `CREATE TABLE naive (seq bigserial PRIMARY KEY, note text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert := func(conn *pgx.Conn, note string) (pgx.Tx, int64) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var seq int64
		if err := tx.QueryRow(ctx, `INSERT INTO naive (note) VALUES ($1) RETURNING seq`, note).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return tx, seq
	}
	var r cursorReader
	read := func() {
		rows, err := reader.Query(ctx, `SELECT seq FROM naive WHERE seq > $1 ORDER BY seq`, int64(r.cursor))
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[uint64])
		if err != nil {
			t.Fatal(err)
		}
		r.take(got)
	}

	tx1, seq1 := insert(tx1c, "first")  // draws 1
	tx2, seq2 := insert(tx2c, "second") // draws 2
	if seq1 != 1 || seq2 != 2 {
		t.Fatalf("sequence drew %d, %d; want 1, 2", seq1, seq2)
	}
	if err := tx2.Commit(ctx); err != nil { // 2 commits first
		t.Fatal(err)
	}
	read() // sees {2}, moves its cursor to 2
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	read() // 1 is committed now, but below the cursor
	if r.gap == nil || len(r.seen) != 1 || r.seen[0] != 2 {
		t.Fatalf("the reader of TestReverseCommitOrder_I1 saw %v over a bigserial cursor and reported %v; "+
			"the control expects it to see only [2] and report 1 as skipped", r.seen, r.gap)
	}
	t.Logf("negative control: over a bigserial cursor the reader reports %q and never sees 1 (it saw %v)", r.gap, r.seen)
	var stored int
	if err := reader.QueryRow(ctx, `SELECT count(*) FROM naive`).Scan(&stored); err != nil || stored != 2 {
		t.Fatalf("naive table holds %d rows (%v), want 2", stored, err)
	}
}

// TestReverseCommitOrder_I1 runs the interleaving of the negative control
// against the store: an appender draws position p and holds its transaction
// open, a second append starts meanwhile. The second cannot draw p+1 (nor
// commit) before the first commits, so commit order is position order, and a
// cursor reader following the boundary never sees p+1 without p.
func TestReverseCommitOrder_I1(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	ctx := context.Background()

	// A reader that follows the boundary with a cursor the whole time and
	// fails on any gap.
	stop := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		var r cursorReader
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			_, page, err := s.Read(ctx, "orders", r.cursor, 100, nil)
			if err != nil {
				readerErr <- err
				return
			}
			r.take(positions(page))
			if r.gap != nil {
				readerErr <- r.gap
				return
			}
			select {
			case <-stop:
				readerErr <- nil
				return
			case <-tick.C:
			}
		}
	}()

	for round := range 5 {
		p, _, commit := holdHead(t, s, "orders", 1) // transaction A draws p
		waiters := lockWaiters(t, s)
		second := backendtest.AppendAsync(ctx, s, "orders", backendtest.Prepared(t, "orders", 1), nil) // B starts
		testutil.Eventually(t, "the second append waits for the head row", 20*time.Second, 2*time.Millisecond, func() bool { return lockWaiters(t, s) > waiters })
		select {
		case o := <-second:
			t.Fatalf("round %d: the second append finished (%+v, %v) while position %d was uncommitted", round, o.Res, o.Err, p)
		default:
		}
		// Neither p nor anything after it is visible yet.
		_, page, err := s.Read(ctx, "orders", uint64(p-1), 10, nil)
		if err != nil || len(page) != 0 {
			t.Fatalf("round %d: read after %d = %v, %v; want nothing while both are uncommitted", round, p-1, page, err)
		}
		commit()
		o := <-second
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Res.First != uint64(p)+1 {
			t.Fatalf("round %d: the second append got position %d, want %d", round, o.Res.First, p+1)
		}
	}
	close(stop)
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	backendtest.WantStored(t, s, "orders", 10, "")
	// The raw draw: a second transaction cannot take the head row either.
	_, _, commitA := holdHead(t, s, "orders", 1)
	conn := connect(t, s)
	lockCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := conn.Exec(lockCtx, `UPDATE orisun_boundaries SET head = head + 1 WHERE name = 'orders'`)
	if err == nil {
		t.Fatal("a second transaction drew a position while another held the head row")
	}
	commitA()
}

// TestSlowAppender: a client that holds a boundary's head row in an open
// transaction makes the appends of that boundary wait (none skips a
// position), while appends to another boundary go through at once (I1,
// docs/design.md §2: appenders of different boundaries never wait on each other).
func TestSlowAppender(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "slow", "fast")
	ctx := context.Background()
	mustAppendN(t, s, "slow", 2)

	p, _, commit := holdHead(t, s, "slow", 1)
	if p != 3 {
		t.Fatalf("the slow appender drew %d, want 3", p)
	}
	waiters := lockWaiters(t, s)
	var waiting []<-chan backendtest.Outcome
	for range 5 {
		waiting = append(waiting, backendtest.AppendAsync(ctx, s, "slow", backendtest.Prepared(t, "slow", 2), nil))
	}
	testutil.Eventually(t, "an append to the slow boundary waits for its head row", 20*time.Second, 2*time.Millisecond, func() bool { return lockWaiters(t, s) > waiters })

	// Another boundary: several appends, each finishing while the slow one
	// is held (a deadline, not a timing assertion: waiting for the held
	// row would never finish).
	for i := range 3 {
		done := backendtest.AppendAsync(ctx, s, "fast", backendtest.Prepared(t, "fast", 3), nil)
		select {
		case o := <-done:
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if o.Res.First != uint64(3*i+1) {
				t.Fatalf("fast append %d at %d, want %d", i, o.Res.First, 3*i+1)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("an append to another boundary waited for the slow boundary's head row")
		}
	}
	for i, w := range waiting {
		select {
		case o := <-w:
			t.Fatalf("slow append %d finished (%+v, %v) while the head row was held", i, o.Res, o.Err)
		default:
		}
	}

	commit()
	positions := map[uint64]bool{}
	for _, w := range waiting {
		o := <-w
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		for p := o.Res.First; p <= o.Res.Last; p++ {
			positions[p] = true
		}
	}
	for p := uint64(4); p < 14; p++ {
		if !positions[p] {
			t.Fatalf("the waiting appends got positions %v; want 4..13 without a gap", positions)
		}
	}
	if events := backendtest.WantStored(t, s, "slow", 13, ""); events[2].Type != "held.event" {
		t.Fatalf("position 3 of slow holds %q, want the held event", events[2].Type)
	}
}

func mustAppendN(t testing.TB, s *Store, boundary string, n int) event.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), boundary, backendtest.Prepared(t, boundary, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// --- group commit ------------------------------------------------------------

// TestFailuresIsolatedInOneGroup puts requests that fail in every way the
// pipelined group knows into one group, between valid ones: a value the
// database refuses (invalid UTF-8 in data, which Go's JSON check lets
// through), a stored id with other content, a failed condition, a retry of
// a stored append and a retry of a request earlier in the same group. Each
// gets its own answer; the valid ones commit together, densely.
func TestFailuresIsolatedInOneGroup(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	seedIn := backendtest.Prepared(t, "orders", 2)
	seedIn[0].Tags = []string{"seed"}
	seed, err := s.Append(t.Context(), "orders", seedIn, nil)
	if err != nil {
		t.Fatal(err)
	}
	release, first := stall(t, s, "orders", 1) // position 3

	valid1 := backendtest.Prepared(t, "orders", 2)
	bad := backendtest.Prepared(t, "orders", 1)
	bad[0].Data = []byte("{\"name\":\"\xff\xfe\"}")
	clash := backendtest.Prepared(t, "orders", 1)
	clash = append(clash, event.Input{ID: seedIn[1].ID, Type: "other.type", Data: []byte(`{}`), Tags: []string{}})
	condFails := backendtest.Prepared(t, "orders", 1)
	cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"seed"}}}}, After: 0}
	retryStored := seedIn
	valid2 := backendtest.Prepared(t, "orders", 3)
	retrySame := valid2

	type req struct {
		name string
		in   []event.Input
		cond *event.Condition
	}
	reqs := []req{
		{"valid 1", valid1, nil},
		{"refused by the database", bad, nil},
		{"stored id, other content", clash, nil},
		{"failed condition", condFails, cond},
		{"retry of a stored append", retryStored, nil},
		{"valid 2", valid2, nil},
		{"retry in the same group", retrySame, nil},
	}
	outs := make([]<-chan backendtest.Outcome, len(reqs))
	for i, r := range reqs {
		outs[i] = backendtest.AppendAsync(context.Background(), s, "orders", r.in, r.cond)
		// One at a time, so the queue (and the group) keeps this order.
		testutil.Eventually(t, "request queued", 20*time.Second, 2*time.Millisecond, func() bool { return s.waiting.Load() == int64(i+1) })
	}
	before := s.groups.Load()
	release()
	if o := <-first; o.Err != nil || o.Res.First != 3 {
		t.Fatalf("stalled append: %+v, %v; want position 3", o.Res, o.Err)
	}
	got := make([]backendtest.Outcome, len(reqs))
	for i := range outs {
		got[i] = <-outs[i]
	}
	if n := s.groups.Load() - before; n != 1 {
		t.Fatalf("the requests took %d transactions, want 1", n)
	}
	want := func(i int, first, last uint64) {
		t.Helper()
		if got[i].Err != nil || got[i].Res.First != first || got[i].Res.Last != last {
			t.Fatalf("%s: %+v, %v; want %d..%d", reqs[i].name, got[i].Res, got[i].Err, first, last)
		}
	}
	want(0, 4, 5)
	if !errors.Is(got[1].Err, event.ErrInvalid) {
		t.Fatalf("%s: %v, want ErrInvalid", reqs[1].name, got[1].Err)
	}
	if !errors.Is(got[2].Err, event.ErrConflict) || !strings.Contains(got[2].Err.Error(), "already stored at position 2") {
		t.Fatalf("%s: %v, want a conflict naming position 2", reqs[2].name, got[2].Err)
	}
	var ce *event.ConflictError
	if !errors.As(got[3].Err, &ce) || ce.Position != 1 {
		t.Fatalf("%s: %v, want a condition conflict at position 1", reqs[3].name, got[3].Err)
	}
	if got[4].Err != nil || got[4].Res != seed {
		t.Fatalf("%s: %+v, %v; want the stored %+v", reqs[4].name, got[4].Res, got[4].Err, seed)
	}
	want(5, 6, 8)
	want(6, 6, 8)
	backendtest.WantStored(t, s, "orders", 8, "")
}

// --- data ----------------------------------------------------------------------

// TestJSONBytesKept: data and metadata come back byte for byte as appended
// (after event.Prepare's compaction): key order, duplicate keys and number
// spelling, which jsonb would change. Retries compare these bytes.
func TestJSONBytesKept(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	in, err := event.Prepare("orders", []event.Input{{
		Type:     "order.placed",
		Data:     json.RawMessage(`{"z": 1, "a": 2, "a": 3, "n": 1.50e+2, "s": "\u00e9\u0000", "u": "é"}`),
		Metadata: json.RawMessage(`{"b":[true,null],"a":{}}`),
		Tags:     []string{"b", "a", "b2"},
	}}, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(t.Context(), "orders", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := backendtest.ReadAll(t, s, "orders")
	if string(got[0].Data) != string(in[0].Data) || string(got[0].Metadata) != string(in[0].Metadata) {
		t.Fatalf("read back data %s metadata %s, want %s and %s", got[0].Data, got[0].Metadata, in[0].Data, in[0].Metadata)
	}
	if strings.Join(got[0].Tags, ",") != "b,a,b2" {
		t.Fatalf("tags read back as %q, want them in their order", got[0].Tags)
	}
	again, err := s.Append(t.Context(), "orders", in, nil)
	if err != nil || again != res {
		t.Fatalf("retry = %+v, %v; want %+v", again, err, res)
	}
}

// --- opening, migrations, configuration -------------------------------------

// TestConcurrentOpenMigratesOnce: stores opening one fresh database at once
// all succeed, and each migration is applied exactly once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	const stores = 6
	opened := make([]*Store, stores)
	errs := make([]error, stores)
	testutil.AtOnce(stores, func(i int) {
		opened[i], errs[i] = Open(context.Background(), Config{URL: dbURL})
	})
	for i, s := range opened {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = s.Close() })
	}
	ms, err := migrations.List(migrations.Postgres, migrations.PostgresDir)
	if err != nil {
		t.Fatal(err)
	}
	var n, maxVersion int
	if err := opened[0].pool.QueryRow(t.Context(), `SELECT count(*), max(version) FROM orisun_schema_migrations`).Scan(&n, &maxVersion); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || maxVersion != ms[len(ms)-1].Version {
		t.Fatalf("orisun_schema_migrations holds %d rows up to %d, want each of the %d versions once", n, maxVersion, len(ms))
	}
	// They share the data.
	backendtest.Create(t, opened[0], "orders")
	mustAppendN(t, opened[1], "orders", 2)
	if b, err := opened[stores-1].Boundary(t.Context(), "orders"); err != nil || b.Head != 2 {
		t.Fatalf("Boundary through another store = %+v, %v; want head 2", b, err)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	s := setup(t, Config{URL: dbURL})
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO orisun_schema_migrations (version, name) VALUES (9999, 'future.sql')`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), Config{URL: dbURL})
	if err == nil || !strings.Contains(err.Error(), "version 9999, newer than this orisun knows") {
		t.Fatalf("Open of a newer schema: %v, want a refusal naming version 9999", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no URL", Config{}, "URL is empty"},
		{"negative conns", Config{URL: "postgres://x@127.0.0.1/db", MaxConns: -1}, "MaxConns is -1"},
		{"negative group", Config{URL: "postgres://x@127.0.0.1/db", GroupMaxEvents: -1}, "GroupMaxEvents is -1"},
		{"negative delay", Config{URL: "postgres://x@127.0.0.1/db", GroupDelay: -time.Millisecond}, "GroupDelay is -1ms"},
		{"reconnect min above max", Config{URL: "postgres://x@127.0.0.1/db", ListenReconnectMin: time.Minute, ListenReconnectMax: time.Second},
			"ListenReconnectMin (1m0s) is above ListenReconnectMax (1s)"},
		{"unparsable URL", Config{URL: "postgres://user:s3cret@127.0.0.1:notaport/db"}, "URL is not a valid PostgreSQL connection string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), tt.cfg)
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open: %v, want ErrInvalid containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

func TestOpenUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the URL of the test server with port 1.
	u, err := url.Parse(pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = u.Hostname() + ":1"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Open(ctx, Config{URL: u.String()})
	if !errors.Is(err, event.ErrUnavailable) {
		t.Fatalf("Open of an unreachable server: %v, want ErrUnavailable", err)
	}
}

// TestOpenRefusesNonUTF8Database: a database whose server encoding is not
// UTF8 is refused at Open, naming the database, its encoding and the fix,
// before any migration has written to it (on LATIN1 the migrations used to
// fail halfway, leaving three of them applied).
func TestOpenRefusesNonUTF8Database(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{"LATIN1", "SQL_ASCII"} {
		t.Run(enc, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.URLWith(t, "ENCODING '"+enc+"' LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Open(ctx, Config{URL: dbURL})
			if err == nil {
				_ = s.Close()
				t.Fatalf("Open of a %s database succeeded", enc)
			}
			db := pgtest.DatabaseName(t, dbURL)
			for _, want := range []string{db, "server_encoding " + enc, "ENCODING 'UTF8'", "wrote nothing"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if !errors.Is(err, event.ErrInvalid) {
				t.Errorf("error %v is not event.ErrInvalid", err)
			}
			var tables int
			if err := pgtest.Connect(t, dbURL).QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Fatalf("the refused database holds %d tables, want none", tables)
			}
		})
	}
}

// --- errors --------------------------------------------------------------------

func TestErrorTranslation(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "b")
	// A real constraint violation: a duplicate (boundary, id).
	id := event.NewID()
	_, err := s.pool.Exec(t.Context(), `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ('b', 1, $1, 't', now(), '{}', '{}'), ('b', 2, $1, 't', now(), '{}', '{}')`, id)
	if err == nil {
		t.Fatal("duplicate id inserted")
	}
	terr := translate("insert", err)
	if !errors.Is(terr, event.ErrConflict) || !strings.Contains(terr.Error(), uniqueIDKey) {
		t.Fatalf("translate(unique violation) = %v, want ErrConflict naming %s", terr, uniqueIDKey)
	}
	// The driver's types must not leak through the seam.
	for e := terr; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(fmt.Sprintf("%T", e), "pgconn") || strings.Contains(fmt.Sprintf("%T", e), "pgx") {
			t.Fatalf("translated error still wraps %T", e)
		}
	}
	// The database's words are marked, so that no client is told them
	// (package api/service); the error's text keeps them for the log.
	var sd *backend.StoreDetail
	if !errors.As(terr, &sd) || !strings.Contains(sd.Text, uniqueIDKey) {
		t.Fatalf("translate(unique violation) = %v: the database's words are not a backend.StoreDetail", terr)
	}
	if unreachable := translate("connect", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}); !errors.Is(unreachable, event.ErrUnavailable) ||
		!errors.As(unreachable, &sd) || !strings.Contains(sd.Text, "connection refused") {
		t.Fatalf("translate(connection refused) = %v: want ErrUnavailable with the driver's words a backend.StoreDetail", unreachable)
	}
	for code, want := range map[string]error{
		"40001": event.ErrUnavailable, "40P01": event.ErrUnavailable, "57P01": event.ErrUnavailable,
		"08006": event.ErrUnavailable, "53300": event.ErrUnavailable, "55P03": event.ErrUnavailable,
		"23505": event.ErrConflict, "23514": event.ErrConflict, "22021": event.ErrInvalid, "54000": event.ErrTooLarge,
	} {
		if got := sentinelOf(code); got != want {
			t.Errorf("sentinelOf(%s) = %v, want %v", code, got, want)
		}
	}
	for _, code := range []string{"42P01", "XX000", "25P02", ""} {
		if got := sentinelOf(code); got != nil {
			t.Errorf("sentinelOf(%q) = %v, want an internal error", code, got)
		}
	}
}

// TestPoolerRefusalNamesPgBouncer: PgBouncer (by default, in every pool
// mode) refuses the startup parameters orisun sets, with this error (seen
// from PgBouncer 1.18 at connect, see docs/deployment.md); PostgreSQL
// accepts them, so the message says where to look.
func TestPoolerRefusalNamesPgBouncer(t *testing.T) {
	t.Parallel()
	refusal := &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: idle_in_transaction_session_timeout"}
	got := translate("connect to 127.0.0.1:6432", fmt.Errorf("failed to connect: %w", refusal))
	if !errors.Is(got, event.ErrUnavailable) || !strings.Contains(got.Error(), "idle_in_transaction_session_timeout") ||
		!strings.Contains(got.Error(), "PgBouncer") || !strings.Contains(got.Error(), "docs/deployment.md") {
		t.Fatalf("translate(PgBouncer's refusal) = %v; want ErrUnavailable naming the parameter, PgBouncer and docs/deployment.md", got)
	}
	// Another protocol violation gets no such hint.
	other := translate("read", &pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "invalid message format"})
	if strings.Contains(other.Error(), "PgBouncer") {
		t.Fatalf("translate(another 08P01) = %v; the PgBouncer hint is only for a refused startup parameter", other)
	}
}

// --- notifications ---------------------------------------------------------------

// TestNotifyAcrossStores: a commit in one store wakes the callbacks of
// another store on the same database, through LISTEN/NOTIFY; when the
// listener's connection is killed it reconnects by itself and the wake-ups
// resume.
func TestNotifyAcrossStores(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	a := setup(t, Config{URL: dbURL})
	b := setup(t, Config{URL: withAppName(t, dbURL, "store_b"), ListenReconnectMin: 10 * time.Millisecond, ListenReconnectMax: 100 * time.Millisecond})
	backendtest.Create(t, a, "orders")
	woken, notify := backendtest.Notified(1024)
	b.OnAppend(notify)
	waitListens(t, b)

	expectWake := func(what string) {
		t.Helper()
		before := b.notifications.Load()
		mustAppendN(t, a, "orders", 1)
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got := <-woken:
				if got == "orders" && b.notifications.Load() > before {
					return
				}
			case <-deadline:
				t.Fatalf("%s: store b was not woken by store a's commit", what)
			}
		}
	}
	expectWake("before the kill")

	pid := listenerPID(t, b)
	pgtest.Exec(t, `SELECT pg_terminate_backend($1)`, pid)
	testutil.Eventually(t, "b's listener reconnects", 20*time.Second, 2*time.Millisecond, func() bool {
		cur := listenerPID(t, b)
		return b.listens.Load() >= 2 && cur != 0 && cur != pid
	})
	expectWake("after the reconnect")
}

// TestOwnNotificationsPassedOver: the listener passes over the
// notifications of the store's own commits, whose OnAppend callbacks the
// store called itself after each commit: one callback a commit, not two
// (the second woke the publisher for a read that found nothing,
// docs/performance.md). Another store's commits still wake it. The set of
// the pool's server processes follows the pool: a connection the pool
// closes leaves it.
func TestOwnNotificationsPassedOver(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	a := setup(t, Config{URL: withAppName(t, dbURL, "store_a")})
	b := setup(t, Config{URL: withAppName(t, dbURL, "store_b")})
	backendtest.Create(t, a, "orders")
	woken, notify := backendtest.Notified(1024)
	a.OnAppend(notify)
	waitListens(t, a)
	waitListens(t, b)

	const n = 5
	for range n {
		mustAppendN(t, a, "orders", 1)
	}
	// The store answers a group's callers before it calls the callbacks:
	// both counts are awaited.
	testutil.Eventually(t, "a's listener to hear its own 5 commits, and their 5 callbacks", 20*time.Second, 2*time.Millisecond, func() bool {
		return a.ownNotifications.Load() == n && len(woken) >= n
	})
	if got := len(woken); got != n {
		t.Fatalf("%d OnAppend callbacks for %d commits of the store's own, want %d: its own notifications woke it again", got, n, n)
	}
	for range n {
		<-woken
	}
	// b's commit is no notification of a's own.
	mustAppendN(t, b, "orders", 1)
	backendtest.WantNotified(t, woken, "orders", 20*time.Second, "a's OnAppend, for b's commit")
	if got := a.ownNotifications.Load(); got != n {
		t.Fatalf("a passed over %d notifications as its own, want %d: b's commit is not", got, n)
	}

	// The set holds the pool's connections' processes, and no other.
	poolPIDs := func() []uint32 {
		rows, err := b.pool.Query(t.Context(), `SELECT pid::bigint FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'store_a' ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		out := make([]uint32, len(pids))
		for i, p := range pids {
			out[i] = uint32(p)
		}
		return out
	}
	ownPIDs := func() []uint32 {
		a.own.mu.Lock()
		defer a.own.mu.Unlock()
		var pids []uint32
		for k := range maps.Keys(a.own.n) {
			pids = append(pids, k.pid)
		}
		slices.Sort(pids)
		return pids
	}
	if got, want := ownPIDs(), poolPIDs(); len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("the store's own processes %v, want its pool's %v", got, want)
	}
	a.pool.Reset() // closes every connection of the pool, in the background
	testutil.Eventually(t, "the store's own processes to leave the set as its pool closes them", 20*time.Second, 2*time.Millisecond, func() bool {
		return len(ownPIDs()) == 0
	})
	mustAppendN(t, a, "orders", 1)
	// The closed connections' processes may still be listed for a moment.
	testutil.Eventually(t, "the store's own processes to be its pool's after new connections", 20*time.Second, 2*time.Millisecond, func() bool {
		want := poolPIDs()
		return len(want) > 0 && slices.Equal(ownPIDs(), want)
	})
}

// TestCommitOfUnknownOutcomeAnnounced: a group whose COMMIT the server ran
// while the store's side failed (a stored row with a NULL tag, read back
// for a retry of its id, fails the scan after the pipelined COMMIT) calls
// the OnAppend callbacks anyway: the listener passes over the NOTIFY of
// the store's own connection, and without the call this node's publisher
// would wait for the head watcher's next read to learn of the event.
func TestCommitOfUnknownOutcomeAnnounced(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	woken, notify := backendtest.Notified(1024)
	s.OnAppend(notify)
	waitListens(t, s)
	bad := event.NewID()
	conn := connect(t, s)
	if _, err := conn.Exec(t.Context(), `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ('orders', 1, $1, 'test.event', now(), ARRAY['a', NULL]::text[], '{}')`, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `UPDATE orisun_boundaries SET head = 1 WHERE name = 'orders'`); err != nil {
		t.Fatal(err)
	}
	retry := []event.Input{{ID: bad, Type: "test.event", Data: []byte(`{}`), Tags: []string{"a"}}}
	fresh := backendtest.Prepared(t, "orders", 1)
	queued, release := s.holdGroups("orders")
	oa := backendtest.AppendAsync(t.Context(), s, "orders", retry, nil)
	testutil.Eventually(t, "the retry queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 1 })
	ob := backendtest.AppendAsync(t.Context(), s, "orders", fresh, nil)
	testutil.Eventually(t, "the fresh append queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 2 })
	release()
	ra, rb := <-oa, <-ob
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM orisun_events WHERE id = $1`, fresh[0].ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || rb.Err == nil {
		t.Fatalf("the fresh event stored %d times, the retry answered %v, the fresh append %v: want it stored once and the group failed on the store's side (the case under test)",
			n, ra.Err, rb.Err)
	}
	backendtest.WantNotified(t, woken, "orders", 20*time.Second, "OnAppend after a COMMIT of unknown outcome")
}

// TestReleaseAnnouncedAcrossStores: a lease released by one store wakes the
// OnLeaseReleased callbacks of another store on the same database, through
// LISTEN/NOTIFY, so a standby node takes the lease at once; a release of a
// lease not held announces nothing.
func TestReleaseAnnouncedAcrossStores(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	a := setup(t, Config{URL: dbURL})
	b := setup(t, Config{URL: withAppName(t, dbURL, "store_b")})
	backendtest.Create(t, a, "orders")
	released, notifyRelease := backendtest.Notified(16)
	b.OnLeaseReleased(notifyRelease)
	appended, notifyAppend := backendtest.Notified(16)
	b.OnAppend(notifyAppend)
	waitListens(t, b)
	ctx := t.Context()
	l, err := a.AcquireLease(ctx, "orders", "node-a", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	backendtest.WantNotified(t, released, "orders", 20*time.Second, "b's OnLeaseReleased")
	if len(appended) != 0 {
		t.Fatalf("a release woke b's OnAppend callbacks (%q): it is no commit of events", <-appended)
	}
	// A second release of the same term changes nothing and announces
	// nothing; an append after it is announced (on the other channel), so
	// by the time b hears of the append it would have heard of a release
	// sent before it.
	if err := a.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	mustAppendN(t, a, "orders", 1)
	select {
	case <-appended:
	case <-time.After(20 * time.Second):
		t.Fatal("store b was not told of store a's append")
	}
	if len(released) != 0 {
		t.Fatalf("a release of a lease not held was announced (%q)", <-released)
	}
}

// waitListens waits until store b's listener (its first) has connected
// and runs LISTEN.
func waitListens(t *testing.T, b *Store) {
	t.Helper()
	testutil.Eventually(t, "b listens", 20*time.Second, 2*time.Millisecond, func() bool { return b.listens.Load() == 1 && listenerPID(t, b) != 0 })
}

// withAppName sets application_name in a URL, so a test can tell a store's
// connections apart in pg_stat_activity.
func withAppName(t testing.TB, raw, name string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// listenerPID is the backend of the store's LISTEN connection (0: none).
func listenerPID(t testing.TB, s *Store) int32 {
	t.Helper()
	var pid int32
	err := s.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = $1`, s.listenCfg.RuntimeParams["application_name"]).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// --- faults ----------------------------------------------------------------------

// TestTerminatedConnectionsDuringAppends kills the pool's connections
// (pg_terminate_backend) again and again while appenders run. An append
// either succeeds or fails with ErrUnavailable; the store recovers by
// itself; every acknowledged event is stored at the position it was given,
// and positions stay dense (I1).
func TestTerminatedConnectionsDuringAppends(t *testing.T) {
	t.Parallel()
	dbURL := withAppName(t, pgtest.URL(t), "killed_store")
	s := setup(t, Config{URL: dbURL})
	backendtest.Create(t, s, "orders")
	ctx := context.Background()

	const appenders, perAppender, kills = 6, 40, 8
	type acked struct {
		id  string
		pos uint64
	}
	var mu sync.Mutex
	var ok []acked
	var refused [][]event.Input
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	progress := make(chan struct{}, appenders*perAppender)
	for range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perAppender {
				in := backendtest.Prepared(t, "orders", 2)
				res, err := s.Append(ctx, "orders", in, nil)
				progress <- struct{}{}
				if err != nil {
					if !errors.Is(err, event.ErrUnavailable) {
						errs <- fmt.Errorf("append during kills: %w, want success or ErrUnavailable", err)
						return
					}
					mu.Lock()
					refused = append(refused, in)
					mu.Unlock()
					continue
				}
				mu.Lock()
				ok = append(ok, acked{in[0].ID, res.First}, acked{in[1].ID, res.Last})
				mu.Unlock()
			}
		}()
	}
	// Kill every connection of the pool after every few appends, a
	// bounded number of times, until the appenders are done.
	appendersDone := make(chan struct{})
	killerDone := make(chan error, 1)
	go func() {
		admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
		if err != nil {
			killerDone <- err
			return
		}
		defer admin.Close(ctx)
		count, killed := 0, 0
		for killed < kills {
			select {
			case <-appendersDone:
				killerDone <- nil
				return
			case <-progress:
			}
			if count++; count%10 != 0 {
				continue
			}
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = $1 AND application_name = 'killed_store'`, pgtest.DatabaseName(t, dbURL)); err != nil {
				killerDone <- err
				return
			}
			killed++
		}
		killerDone <- nil
	}()
	wg.Wait()
	close(appendersDone)
	if err := <-killerDone; err != nil {
		t.Fatalf("kill the pool's connections: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d appends acknowledged, %d refused with ErrUnavailable", len(ok)/2, len(refused))

	// The store recovers by itself.
	testutil.Eventually(t, "appends succeed again", 20*time.Second, 2*time.Millisecond, func() bool {
		_, err := s.Append(ctx, "orders", backendtest.Prepared(t, "orders", 1), nil)
		return err == nil
	})
	// A refused append may have committed (the connection can die after
	// the commit, before its answer): sent again with the same ids, it
	// gets its stored positions or new ones, never a duplicate.
	for _, in := range refused {
		res, err := s.Append(ctx, "orders", in, nil)
		if err != nil {
			t.Fatalf("retry of a refused append: %v", err)
		}
		ok = append(ok, acked{in[0].ID, res.First}, acked{in[1].ID, res.Last})
	}
	events := backendtest.ReadAll(t, s, "orders")
	backendtest.CheckDense(t, events)
	at := map[string]uint64{}
	for _, e := range events {
		if _, dup := at[e.ID]; dup {
			t.Fatalf("id %s is stored twice", e.ID)
		}
		at[e.ID] = e.Position
	}
	for _, a := range ok {
		if at[a.id] != a.pos {
			t.Fatalf("acknowledged id %s at position %d is stored at %d (0: lost)", a.id, a.pos, at[a.id])
		}
	}
}

// --- lifecycle -------------------------------------------------------------------

// TestNoGoroutineLeak: after Close nothing of the store runs: not the
// workers, not the listener, not the pool's health check. Not parallel: it
// counts the process's goroutines.
func TestNoGoroutineLeak(t *testing.T) {
	dbURL := pgtest.URL(t)
	backendtest.NoGoroutineLeak(t, func(t *testing.T) backend.Store { return setup(t, Config{URL: dbURL}) },
		func(s backend.Store) bool { return s.(*Store).listens.Load() == 1 })
}

// TestOpenUnresponsiveServerTimesOut: a server that accepts the TCP
// connection and never answers fails Open after the default connect
// timeout, not the OS's TCP timeout.
func TestOpenUnresponsiveServerTimesOut(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accept, never answer
		}
	}()
	start := time.Now()
	_, err = Open(context.Background(), Config{URL: "postgres://nobody@" + l.Addr().String() + "/db?sslmode=disable"})
	if err == nil {
		t.Fatal("Open succeeded against a server that never answers")
	}
	if took := time.Since(start); took > 3*defaultConnectTimeout {
		t.Fatalf("Open took %s to fail", took)
	}
	if !errors.Is(err, event.ErrUnavailable) {
		t.Fatalf("error %v is not ErrUnavailable", err)
	}
}

// features are the PostgreSQL store's test hooks for the conformance suite.
var features = backendtest.Features{
	HoldGroups: func(s backend.Store, b string) (func() int, func()) { return s.(*Store).holdGroups(b) },
	Groups:     func(s backend.Store) int64 { return s.(*Store).groups.Load() },
	Stall: func(t *testing.T, s backend.Store, b string, n int) (func(), <-chan backendtest.Outcome) {
		return stall(t, s.(*Store), b, n)
	},
	Queued:  func(s backend.Store) int64 { return s.(*Store).waiting.Load() },
	Closing: func(s backend.Store) bool { return s.(*Store).isClosed() },
	// No SetText: the json and text[] columns refuse what it would write.
	Edit: &backendtest.Edit{
		Delete: func(t *testing.T, s backend.Store, b string, pos uint64) {
			edit(t, s.(*Store), `DELETE FROM orisun_events WHERE boundary = $1 AND position = $2`, b, int64(pos))
		},
		Move: func(t *testing.T, s backend.Store, b string, from, to uint64) {
			edit(t, s.(*Store), `UPDATE orisun_events SET position = $1 WHERE boundary = $2 AND position = $3`, int64(to), b, int64(from))
		},
	},
}

// edit changes one row of the store's database with SQL on a connection
// of its own, behind the store's back, and fails unless it did.
func edit(t *testing.T, s *Store, query string, args ...any) {
	t.Helper()
	tag, err := connect(t, s).Exec(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("%s changed %d rows, want 1", query, tag.RowsAffected())
	}
}

// TestHeadsHeld_I7: the shared head read says which head rows an open
// transaction holds (locked, or updated and not committed), with the
// committed head, and stops saying so once the transaction ends: it is
// what sends an idle publisher to probe its head row, so that the status
// says it waits for the transaction (I7) without every publisher probing
// every poll interval.
func TestHeadsHeld_I7(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "locked", "drawn", "free")
	ctx := context.Background()
	mustAppendN(t, s, "drawn", 2)
	heads := func() map[string]backend.Head {
		t.Helper()
		hs, err := s.Heads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]backend.Head{}
		for _, h := range hs {
			m[h.Boundary.Name] = h
		}
		return m
	}
	if hs := heads(); hs["locked"].Held || hs["drawn"].Held || hs["free"].Held {
		t.Fatalf("held head rows with no transaction open: %+v", hs)
	}
	_, _, commitLocked := holdHead(t, s, "locked", 0)
	_, _, commitDrawn := holdHead(t, s, "drawn", 1)
	hs := heads()
	if !hs["locked"].Held || !hs["drawn"].Held || hs["free"].Held {
		t.Fatalf("with locked and drawn held open: %+v, want those two held, free not", hs)
	}
	if hs["drawn"].Boundary.Head != 2 {
		t.Fatalf("drawn's head %d while its third position is uncommitted, want the committed 2", hs["drawn"].Boundary.Head)
	}
	commitLocked()
	commitDrawn()
	hs = heads()
	if hs["locked"].Held || hs["drawn"].Held || hs["free"].Held || hs["drawn"].Boundary.Head != 3 {
		t.Fatalf("after both transactions committed: %+v, want none held and drawn at 3", hs)
	}
}

// TestHeadsHeldThroughReleasedSavepoint_I7: a head row updated inside a
// savepoint that was then released (orisun_append called in a SAVEPOINT,
// docs/outbox.md) is held by the top transaction until it ends, and Heads
// says so: the row's xmax is then the savepoint's subtransaction id, which
// pg_locks no longer lists, so a read that matched xmax against pg_locks
// said "not held" while every append of the boundary waited. A savepoint
// rolled back releases the row, and Heads says that too.
func TestHeadsHeldThroughReleasedSavepoint_I7(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	backendtest.Create(t, s, "saved", "undone")
	ctx := context.Background()
	held := func() map[string]bool {
		t.Helper()
		hs, err := s.Heads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, h := range hs {
			m[h.Boundary.Name] = h.Held
		}
		return m
	}
	conn := connect(t, s)
	tx := pgtest.Begin(t, conn)
	// Give the top transaction an id of its own first, as an application
	// that wrote its own rows before the savepoint has.
	for _, q := range []string{`SELECT pg_current_xact_id()`,
		`SAVEPOINT a`, `UPDATE orisun_boundaries SET head = head WHERE name = 'saved'`, `RELEASE SAVEPOINT a`,
		`SAVEPOINT b`, `UPDATE orisun_boundaries SET head = head WHERE name = 'undone'`, `ROLLBACK TO SAVEPOINT b`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if h := held(); !h["saved"] || h["undone"] {
		t.Fatalf("held %v: want saved held (released savepoint), undone free (rolled-back savepoint)", h)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if h := held(); h["saved"] || h["undone"] {
		t.Fatalf("held %v after the commit, want neither", h)
	}
}

// TestHeadsHeldByAGroup_I7: Heads reports a head row held by a real group
// transaction of this store, not only by a transaction that updates the row
// directly. The group takes the row, then updates it inside a savepoint; a
// lock taken with SELECT … FOR NO KEY UPDATE left a multixact on the row,
// which Heads could not match against the running transactions, so an
// idle publisher was never woken to probe and the status said "caught up"
// until the backstop poll. Here the group's COMMIT waits on an advisory
// lock the test holds (a deferred trigger), with the row held.
func TestHeadsHeldByAGroup_I7(t *testing.T) {
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	ctx := context.Background()
	conn := connect(t, s)
	if _, err := conn.Exec(ctx, `
CREATE FUNCTION test_wait() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_lock(4242); PERFORM pg_advisory_unlock(4242); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER test_wait AFTER INSERT ON orisun_events DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION test_wait();`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
				t.Error(err)
			}
		}
	}
	defer unlock()
	out := backendtest.AppendAsync(ctx, s, "orders", backendtest.Prepared(t, "orders", 1), nil)
	held := func() bool {
		hs, err := s.Heads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Boundary.Name == "orders" {
				return h.Held
			}
		}
		t.Fatal("no head for orders")
		return false
	}
	testutil.Eventually(t, "Heads to report the head row held while a group transaction holds it (its COMMIT waits)", 30*time.Second, 20*time.Millisecond, func() bool {
		select {
		case r := <-out:
			t.Fatalf("the append finished (%+v) while its COMMIT should wait", r)
		default:
		}
		return held()
	})
	unlock()
	if r := <-out; r.Err != nil || r.Res.First != 1 {
		t.Fatalf("append after the COMMIT went on: %+v", r)
	}
	if held() {
		t.Fatal("the head row is still reported held after the group committed")
	}
}
