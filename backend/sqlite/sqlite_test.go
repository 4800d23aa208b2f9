package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/migrations"
)

// setup opens a store in a new temporary directory (or cfg.Dir) and closes
// it at the end of the test.
func setup(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	backendtest.Closed(t, s)
	return s
}

// TestConformance runs the suite of the store seam (backendtest.RunAll),
// with stall (the write connection held) as Features.Stall.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, openGroups, func(t *testing.T, s backend.Store) backend.Store { return setup(t, Config{Dir: s.(*Store).cfg.Dir}) }, features)
}

// openGroups is setup with the group settings g (backendtest.RunAll and
// BenchAppend); SmallGroups' stores run at Synchronous OFF.
func openGroups(t testing.TB, g backendtest.Groups) backend.Store {
	cfg := Config{GroupDelay: g.Delay, GroupMaxEvents: g.MaxEvents}
	if g == backendtest.SmallGroups {
		cfg.Synchronous = "OFF"
	}
	return setup(t, cfg)
}

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Config{Dir: dir})
	if err == nil {
		t.Fatal("a second Open of a locked directory succeeded")
	}
	want := fmt.Sprintf("data directory %q is locked by another orisun process (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("second Open: %q, want it to contain %q", err, want)
	}
	if !errors.Is(err, event.ErrUnavailable) {
		t.Fatalf("second Open: errors.Is(err, ErrUnavailable) is false for %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatalf("Open after the owner closed: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCreatesNestedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir with ? and # and %20", "data")
	s := setup(t, Config{Dir: dir})
	backendtest.Create(t, s, "orders")
	if _, err := os.Stat(filepath.Join(dir, DBFile)); err != nil {
		t.Fatalf("the database is not at %s: %v", filepath.Join(dir, DBFile), err)
	}
}

func TestReopenKeepsDataAndMigrationsOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.CreateBoundary(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(t.Context(), "orders", backendtest.Prepared(t, "orders", 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(t.Context(), "orders", "n1", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveCheckpoint(t.Context(), "orders", l, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		s = setup(t, Config{Dir: dir})
		got, err := s.Boundary(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if got.Epoch != b.Epoch || got.Head != res.Last {
			t.Fatalf("after reopen: %+v, want epoch %s head %d", got, b.Epoch, res.Last)
		}
		if cp, err := s.Checkpoint(t.Context(), "orders"); err != nil || cp != 4 {
			t.Fatalf("checkpoint after reopen = %d, %v; want 4", cp, err)
		}
		if cur, err := s.LeaseHolder(t.Context(), "orders"); err != nil || cur.Term != l.Term || cur.Holder != "n1" {
			t.Fatalf("lease after reopen = %+v, %v; want %+v", cur, err, l)
		}
		ms, err := migrations.List(migrations.SQLite, migrations.SQLiteDir)
		if err != nil {
			t.Fatal(err)
		}
		var n, max int
		if err := s.rdb.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
			t.Fatal(err)
		}
		if n != len(ms) || max != ms[len(ms)-1].Version {
			t.Fatalf("schema_migrations holds %d rows up to %d, want each of the %d versions once", n, max, len(ms))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := setup(t, Config{Dir: dir})
	if _, err := s.wdb.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "version 9999, newer than this orisun knows") {
		t.Fatalf("Open of a newer schema: %v, want a refusal naming version 9999", err)
	}
	// The refused Open released the directory lock: trying again fails
	// for the same reason, not because of a stale lock.
	_, err = Open(context.Background(), Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "newer than this orisun knows") {
		t.Fatalf("second Open of a newer schema: %v, want the same refusal", err)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no dir", Config{}, "Dir is empty"},
		{"bad synchronous", Config{Dir: t.TempDir(), Synchronous: "FAST"}, `Synchronous is "FAST"; use OFF, NORMAL, FULL or EXTRA`},
		{"injected synchronous", Config{Dir: t.TempDir(), Synchronous: "FULL); DROP TABLE events; --"}, "Synchronous is"},
		{"negative group", Config{Dir: t.TempDir(), GroupMaxEvents: -1}, "GroupMaxEvents is -1"},
		{"negative delay", Config{Dir: t.TempDir(), GroupDelay: -time.Millisecond}, "GroupDelay is -1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), tt.cfg)
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open: %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestPragmas(t *testing.T) {
	for level, want := range map[string]int{"off": 0, "NORMAL": 1, "": 2, "Full": 2, "EXTRA": 3} {
		t.Run("synchronous "+level, func(t *testing.T) {
			s := setup(t, Config{Synchronous: level})
			var mode string
			var sync int
			if err := s.wdb.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if err := s.wdb.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
				t.Fatal(err)
			}
			if mode != "wal" || sync != want {
				t.Fatalf("journal_mode %s, synchronous %d; want wal, %d", mode, sync, want)
			}
			var page int
			if err := s.wdb.QueryRow(`PRAGMA page_size`).Scan(&page); err != nil {
				t.Fatal(err)
			}
			if page != PageSize {
				t.Fatalf("page_size %d; want %d for a new database", page, PageSize)
			}
			if _, err := s.rdb.Exec(`INSERT INTO leases VALUES ('x', 'y', 1, 0)`); err == nil {
				t.Fatal("a reader connection could write; readers must be query_only")
			}
		})
	}
}

// TestExistingDatabaseKeepsItsPageSize: a database created with SQLite's
// default page size of 4,096 bytes, in WAL mode (every orisun database
// before 8 KB pages), opens, takes the migrations, keeps its page size
// (SQLite fixes it at creation) and stores and reads an event that spills
// into an overflow page there.
func TestExistingDatabaseKeepsItsPageSize(t *testing.T) {
	dir := t.TempDir()
	old, err := sql.Open("sqlite", dsn(filepath.Join(dir, DBFile), url.Values{"_pragma": {"page_size(4096)"}, "_journal_mode": {"WAL"}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE created_before (x)`); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := setup(t, Config{Dir: dir})
	var page int
	if err := s.wdb.QueryRow(`PRAGMA page_size`).Scan(&page); err != nil {
		t.Fatal(err)
	}
	if page != 4096 {
		t.Fatalf("page_size %d; a database created with 4096-byte pages must keep them", page)
	}
	ctx := context.Background()
	backendtest.Create(t, s, "b")
	data := json.RawMessage(`{"pad":"` + strings.Repeat("x", 6000) + `"}`)
	in, err := event.Prepare("b", []event.Input{{Type: "t", Data: data, Tags: []string{"k"}}}, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "b", in, nil); err != nil {
		t.Fatal(err)
	}
	_, got, err := s.Read(ctx, "b", 0, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[0].Data) != string(in[0].Data) {
		t.Fatalf("read back %d events; want the one appended, its data unchanged", len(got))
	}
}

// TestOpenRefusesADatabaseWithoutWAL: where SQLite cannot switch to WAL
// (a file system without the shared memory it needs; here a VFS without
// it) it stays in its rollback journal without an error. Open refuses to
// run so, says why, and leaves the directory unlocked.
func TestOpenRefusesADatabaseWithoutWAL(t *testing.T) {
	dir := t.TempDir()
	testWriterParams = url.Values{"vfs": {"unix-dotfile"}}
	_, err := Open(context.Background(), Config{Dir: dir})
	testWriterParams = nil
	if err == nil || !strings.Contains(err.Error(), "WAL mode") || !strings.Contains(err.Error(), "local disk") {
		t.Fatalf("Open without WAL: %v; want an error saying WAL could not be set and to use a local disk", err)
	}
	s := setup(t, Config{Dir: dir})
	var mode string
	if err := s.wdb.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode %s after a normal Open of the same directory; want wal", mode)
	}
}

// stall takes the one write connection and sends one append of n events to
// boundary, which the writer takes into a group and then stalls on, at
// BEGIN. When stall returns, the writer is stuck there, so every further
// append waits in the queue, deterministically. release gives the
// connection back; first reports the stalled append's outcome.
func stall(t *testing.T, s *Store, boundary string, n int) (release func(), first <-chan backendtest.Outcome) {
	t.Helper()
	conn, err := s.wdb.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = conn.Close() }) }
	t.Cleanup(release)
	before := s.groups.Load()
	first = backendtest.AppendAsync(context.Background(), s, boundary, backendtest.Prepared(t, boundary, n), nil)
	testutil.Eventually(t, "the writer begins a group", 10*time.Second, time.Millisecond, func() bool { return s.groups.Load() == before+1 })
	return release, first
}

func TestErrorTranslation(t *testing.T) {
	s := setup(t, Config{})
	// A constraint violation from the database: a duplicate (boundary, id).
	_, err := s.wdb.Exec(`INSERT INTO events VALUES ('b', 1, 'x', 't', 0, '[]', '{}', NULL), ('b', 2, 'x', 't', 0, '[]', '{}', NULL)`)
	if err == nil {
		t.Fatal("duplicate id inserted")
	}
	terr := translate("insert", err)
	if !errors.Is(terr, event.ErrConflict) {
		t.Fatalf("translate(constraint) = %v, want ErrConflict", terr)
	}
	// The driver's type must not leak through the seam.
	for e := terr; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(fmt.Sprintf("%T", e), "sqlite.Error") {
			t.Fatalf("translated error still wraps %T", e)
		}
	}
	// The database's words are marked, so that no client is told them
	// (package api/service); the error's text keeps them for the log.
	var sd *backend.StoreDetail
	if !errors.As(terr, &sd) || !strings.Contains(sd.Text, "UNIQUE") {
		t.Fatalf("translate(constraint) = %v: the database's words are not a backend.StoreDetail", terr)
	}
	// A busy database: another connection holds the write lock.
	other, err := sql.Open("sqlite", dsn(filepath.Join(s.cfg.Dir, DBFile), url.Values{"_pragma": {"busy_timeout(1)"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := s.wdb.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = other.Exec(`INSERT INTO leases VALUES ('x', 'y', 1, 0)`)
	if err == nil {
		t.Fatal("a second writer got the lock")
	}
	if terr := translate("write", err); !errors.Is(terr, event.ErrUnavailable) {
		t.Fatalf("translate(busy) = %v, want ErrUnavailable", terr)
	}
}

// TestNoGoroutineLeak: after Close nothing of the store runs. Not parallel:
// it counts the process's goroutines.
func TestNoGoroutineLeak(t *testing.T) {
	backendtest.NoGoroutineLeak(t, func(t *testing.T) backend.Store { return setup(t, Config{}) }, nil)
}

// FuzzTagMatch: any valid tag is stored and matched as exactly itself, never
// as a pattern or a fragment (tags become SQL values and JSON).
func FuzzTagMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"a", "b"}, {"%", "100%"}, {"_", "a_c"}, {`"`, `a"b`}, {"x", "x,y"}, {"z", "[z]"},
		{`\`, `\\`}, {"'", "''"}, {"ü", "u"}, {"null", "[]"}, {"a", "a "},
	} {
		f.Add(seed[0], seed[1])
	}
	s := setup(f, Config{Synchronous: "OFF"})
	backendtest.Create(f, s, "fuzz")
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, a, b string) {
		if event.ValidateTag(a) != nil || event.ValidateTag(b) != nil {
			return // not tags an append accepts: nothing to match
		}
		in, err := event.Prepare("fuzz", []event.Input{{Type: "fuzz", Data: []byte(`{}`), Tags: []string{a}}}, event.Limits{})
		if err != nil {
			return
		}
		res, err := s.Append(context.Background(), "fuzz", in, nil)
		if err != nil {
			t.Fatal(err)
		}
		n.Add(1)
		for _, tag := range []string{a, b} {
			q := &event.Query{Items: []event.QueryItem{{Tags: []string{tag}}}}
			_, events, err := s.Read(context.Background(), "fuzz", res.First-1, 1, q)
			if err != nil {
				t.Fatal(err)
			}
			found := len(events) == 1 && events[0].Position == res.First
			if want := tag == a; found != want {
				t.Fatalf("event tagged %q: query for tag %q found it = %v, want %v", a, tag, found, want)
			}
			if found && (len(events[0].Tags) != 1 || events[0].Tags[0] != a) {
				t.Fatalf("tag %q read back as %q", a, events[0].Tags)
			}
		}
	})
}

// TestFailureAfterHeadTakenIsIsolated_I1: a request that fails after its
// head row update and part of its inserts (here a trigger refuses its 150th
// event, in the second insert chunk) is rolled back to its savepoint alone:
// the head never counts events that were not stored, the other requests of
// the group commit, and positions stay dense. Without the savepoint the head
// would run ahead of the stored events: a gap.
func TestFailureAfterHeadTakenIsIsolated_I1(t *testing.T) {
	s := setup(t, Config{})
	ctx := t.Context()
	backendtest.Create(t, s, "orders")
	if _, err := s.wdb.ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON events
WHEN NEW.type = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned event'); END`); err != nil {
		t.Fatal(err)
	}
	release, first := stall(t, s, "orders", 1)
	const callers = 10
	type result struct {
		ids    []string
		res    event.AppendResult
		err    error
		poison bool
	}
	results := make(chan result, callers)
	for i := range callers {
		in := backendtest.Prepared(t, "orders", 150)
		poison := i%3 == 0
		if poison {
			in[149].Type = "poison"
		}
		ids := make([]string, len(in))
		for j := range in {
			ids[j] = in[j].ID
		}
		go func() {
			res, err := s.Append(context.Background(), "orders", in, nil)
			results <- result{ids: ids, res: res, err: err, poison: poison}
		}()
	}
	testutil.Eventually(t, "callers queued", 10*time.Second, time.Millisecond, func() bool { return s.waiting.Load() == callers })
	release()
	if o := <-first; o.Err != nil {
		t.Fatal(o.Err)
	}
	stored := uint64(1)
	var ok []result
	for range callers {
		r := <-results
		switch {
		case r.poison && r.err == nil:
			t.Fatal("a poisoned append succeeded")
		case !r.poison && r.err != nil:
			t.Fatalf("an append in the same group as a poisoned one failed: %v", r.err)
		case r.err == nil:
			stored += 150
			ok = append(ok, r)
		}
	}
	b, err := s.Boundary(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if b.Head != stored {
		t.Fatalf("head %d, stored %d events: the head counts events that were rolled back", b.Head, stored)
	}
	evs := backendtest.WantStored(t, s, "orders", int(stored), ", the head")
	for _, r := range ok {
		for j, id := range r.ids {
			if evs[r.res.First-1+uint64(j)].ID != id {
				t.Fatalf("position %d does not hold the append's event %d", r.res.First+uint64(j), j)
			}
		}
	}
}

// features are the SQLite store's test hooks for the conformance suite.
var features = backendtest.Features{
	HoldGroups: func(s backend.Store, _ string) (func() int, func()) { return s.(*Store).holdGroups() },
	Groups:     func(s backend.Store) int64 { return s.(*Store).groups.Load() },
	Stall: func(t *testing.T, s backend.Store, b string, n int) (func(), <-chan backendtest.Outcome) {
		return stall(t, s.(*Store), b, n)
	},
	Queued:  func(s backend.Store) int64 { return s.(*Store).waiting.Load() },
	Closing: func(s backend.Store) bool { return s.(*Store).closed() },
	Edit: &backendtest.Edit{
		Delete: func(t *testing.T, s backend.Store, b string, pos uint64) {
			edit(t, s.(*Store), `DELETE FROM events WHERE boundary = ? AND position = ?`, b, pos)
		},
		Move: func(t *testing.T, s backend.Store, b string, from, to uint64) {
			edit(t, s.(*Store), `UPDATE events SET position = ? WHERE boundary = ? AND position = ?`, to, b, from)
		},
		SetText: func(t *testing.T, s backend.Store, b string, pos uint64, column, text string) {
			cols := map[string]string{"data": "data", "metadata": "metadata", "tags": "tags"}
			edit(t, s.(*Store), `UPDATE events SET `+cols[column]+` = ? WHERE boundary = ? AND position = ?`, text, b, pos)
		},
	},
}

// edit changes one row of the store's database with SQL on a connection
// of its own, behind the store's back, and fails unless it did.
func edit(t *testing.T, s *Store, query string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(filepath.Join(s.cfg.Dir, DBFile), url.Values{"_pragma": {"busy_timeout(10000)"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("%s changed %d rows (%v), want 1", query, n, err)
	}
}

// heldRequest is an append that sendHeld sends.
type heldRequest struct {
	ctx      context.Context
	boundary string
	in       []event.Input
	cond     *event.Condition
}

// sendHeld holds the groups of s (holdGroups) and sends the requests in
// order, each once the one before it is queued: release lets them go, in
// one group, in this order (the test's cleanup releases them too).
func sendHeld(t *testing.T, s *Store, reqs []heldRequest) (outs []<-chan backendtest.Outcome, release func()) {
	t.Helper()
	queued, release := s.holdGroups()
	t.Cleanup(release)
	for i, r := range reqs {
		outs = append(outs, backendtest.AppendAsync(r.ctx, s, r.boundary, r.in, r.cond))
		testutil.Eventually(t, "request held", 10*time.Second, time.Millisecond, func() bool { return queued() == i+1 })
	}
	return outs, release
}

// TestMergedRun: requests without conditions to one boundary in one group
// are appended by one run (one id lookup, head update and insert), with
// the positions of their order of arrival; a run with an id twice (a retry
// in the same group) or a stored id goes one request at a time and gets
// the answers it would get alone.
func TestMergedRun(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	stored := backendtest.Prepared(t, "orders", 2)
	if _, err := s.Append(ctx, "orders", stored, nil); err != nil {
		t.Fatal(err)
	}
	group := func(ins [][]event.Input) []backendtest.Outcome {
		t.Helper()
		groups := s.groups.Load()
		reqs := make([]heldRequest, len(ins))
		for i, in := range ins {
			reqs[i] = heldRequest{ctx: ctx, boundary: "orders", in: in}
		}
		outs, release := sendHeld(t, s, reqs)
		release()
		got := make([]backendtest.Outcome, len(reqs))
		for i := range outs {
			got[i] = <-outs[i]
		}
		if n := s.groups.Load() - groups; n != 1 {
			t.Fatalf("%d group transactions, want 1", n)
		}
		return got
	}

	// Five fresh requests: one merged run, positions in arrival order.
	var reqs [][]event.Input
	for i := range 5 {
		reqs = append(reqs, backendtest.Prepared(t, "orders", 1+i%2))
	}
	merged := s.merged.Load()
	got := group(reqs)
	if n := s.merged.Load() - merged; n != 1 {
		t.Fatalf("%d merged runs, want 1", n)
	}
	next := uint64(3)
	for i, o := range got {
		n := uint64(len(reqs[i]))
		if o.Err != nil || o.Res.First != next || o.Res.Last != next+n-1 {
			t.Fatalf("request %d: %+v, %v; want %d..%d", i, o.Res, o.Err, next, next+n-1)
		}
		next += n
	}

	// A retry of a stored append and a retry within the group: one at a
	// time, each answered as alone.
	fresh := backendtest.Prepared(t, "orders", 1)
	got = group([][]event.Input{backendtest.Prepared(t, "orders", 1), stored, fresh, fresh})
	if got[0].Err != nil || got[0].Res.First != next {
		t.Fatalf("fresh request: %+v, %v; want position %d", got[0].Res, got[0].Err, next)
	}
	if got[1].Err != nil || got[1].Res.First != 1 || got[1].Res.Last != 2 {
		t.Fatalf("retry of the stored append: %+v, %v; want 1..2", got[1].Res, got[1].Err)
	}
	if got[2].Err != nil || got[3].Err != nil || got[2].Res != got[3].Res || got[2].Res.First != next+1 {
		t.Fatalf("retry in the same group: %+v, %v and %+v, %v; want both at %d", got[2].Res, got[2].Err, got[3].Res, got[3].Err, next+1)
	}
	backendtest.WantStored(t, s, "orders", int(next+1), "")
}

// TestMergedRunsPerBoundary: the requests of a group whose callers
// interleave boundaries append in one run per boundary (and after a
// request with a condition, one more), each boundary's requests at the
// positions of their order of arrival, each caller answered with its own
// events; a request with a condition sees what its boundary's requests
// before it in the group wrote, and nothing of another boundary's.
func TestMergedRunsPerBoundary(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Config{})
	for _, b := range []string{"orders", "stock", "users", "carts"} {
		backendtest.Create(t, s, b)
	}
	req := func(boundary string, n int, cond *event.Condition) heldRequest {
		return heldRequest{ctx: ctx, boundary: boundary, in: backendtest.Prepared(t, boundary, n), cond: cond}
	}
	// Every event of Prepared is of type test.event: "none after 0"
	// fails once its boundary holds one.
	noneYet := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Types: []string{"test.event"}}}}}
	// group runs reqs in one held group and checks that each boundary
	// holds, from position 1 on, the events of the requests sent to it so
	// far in order of arrival (those of refused requests left out), and
	// that mergedRuns runs merged.
	next := map[string]uint64{}
	wantIDs := map[string][]string{}
	group := func(reqs []heldRequest, refused map[int]bool, mergedRuns int64) {
		t.Helper()
		groups, merged := s.groups.Load(), s.merged.Load()
		outs, release := sendHeld(t, s, reqs)
		release()
		for i, r := range reqs {
			o := <-outs[i]
			if refused[i] {
				var ce *event.ConflictError
				if !errors.As(o.Err, &ce) {
					t.Fatalf("request %d (%s, with a condition): %+v, %v; want a conflict", i, r.boundary, o.Res, o.Err)
				}
				continue
			}
			first := next[r.boundary] + 1
			last := first + uint64(len(r.in)) - 1
			if o.Err != nil || o.Res.First != first || o.Res.Last != last {
				t.Fatalf("request %d (%s): %+v, %v; want %d..%d", i, r.boundary, o.Res, o.Err, first, last)
			}
			next[r.boundary] = last
			for _, e := range r.in {
				wantIDs[r.boundary] = append(wantIDs[r.boundary], e.ID)
			}
		}
		if n := s.groups.Load() - groups; n != 1 {
			t.Fatalf("%d group transactions, want 1", n)
		}
		if n := s.merged.Load() - merged; n != mergedRuns {
			t.Fatalf("%d merged runs, want %d", n, mergedRuns)
		}
		for b, ids := range wantIDs {
			events := backendtest.WantStored(t, s, b, len(ids), "")
			for k, e := range events {
				if e.ID != ids[k] {
					t.Fatalf("%s position %d holds %s, want %s (request order)", b, e.Position, e.ID, ids[k])
				}
			}
		}
	}

	// A condition on a boundary still empty passes, whatever another
	// boundary's requests before it in the group wrote.
	group([]heldRequest{req("stock", 1, nil), req("stock", 2, nil), req("orders", 1, noneYet)}, nil, 1)

	// Interleaved: carts' two requests before its conditional one merge
	// (the first of them makes it fail), then its two after it; stock's
	// three and users' two merge.
	group([]heldRequest{
		req("users", 1, nil), req("carts", 1, nil), req("stock", 2, nil), req("carts", 2, nil), req("users", 2, nil),
		req("stock", 1, nil), req("carts", 1, noneYet), req("stock", 1, nil), req("carts", 1, nil), req("carts", 2, nil),
	}, map[int]bool{6: true}, 4)

	// Many interleaved requests (more than a sort by insertion handles):
	// each boundary's keep their order of arrival.
	var many []heldRequest
	for i := range 45 {
		many = append(many, req([]string{"orders", "stock", "users"}[i%3], 1+i%2, nil))
	}
	group(many, nil, 3)
}

// TestMergedRunEdges: a run whose caller gave up in the middle, a run to a
// boundary that does not exist, and a request of the first run's boundary
// after the other boundary's (the group runs boundary by boundary: it
// joins the first run): the
// cancelled request writes nothing, the others keep the positions of their
// order (no gap where the cancelled one was), the missing boundary's
// requests are each answered ErrNotFound.
func TestMergedRunEdges(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	cctx, cancel := context.WithCancel(ctx)
	req := func(ctx context.Context, boundary string, n int) heldRequest {
		return heldRequest{ctx: ctx, boundary: boundary, in: backendtest.Prepared(t, boundary, n)}
	}
	outs, release := sendHeld(t, s, []heldRequest{req(ctx, "orders", 1), req(cctx, "orders", 2), req(ctx, "orders", 1),
		req(ctx, "nope", 1), req(ctx, "nope", 1), req(ctx, "orders", 1)})
	cancel()
	if o := <-outs[1]; !errors.Is(o.Err, context.Canceled) {
		t.Fatalf("the cancelled request: %+v, %v", o.Res, o.Err)
	}
	release()
	for i, want := range []uint64{1, 0, 2, 0, 0, 3} {
		if i == 1 {
			continue
		}
		o := <-outs[i]
		if want == 0 {
			if !errors.Is(o.Err, event.ErrNotFound) {
				t.Fatalf("request %d to a missing boundary: %+v, %v", i, o.Res, o.Err)
			}
			continue
		}
		if o.Err != nil || o.Res.First != want || o.Res.Last != want {
			t.Fatalf("request %d: %+v, %v; want position %d", i, o.Res, o.Err, want)
		}
	}
	backendtest.WantStored(t, s, "orders", 3, ": no gap where the cancelled request was")
}

// TestConditionStatementsPreparedOnce: conditions of one query shape share
// one statement prepared on the write connection, whatever their values;
// another shape adds one; and no more than maxDynStmts are kept.
func TestConditionStatementsPreparedOnce(t *testing.T) {
	ctx := context.Background()
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	appendIf := func(q event.Query) {
		t.Helper()
		if _, err := s.Append(ctx, "orders", backendtest.Prepared(t, "orders", 1), &event.Condition{Query: q}); err != nil {
			t.Fatal(err)
		}
	}
	// Append returns after the writer's group: s.dyn is read after the
	// writer wrote it (the reply orders the two).
	for i := range 3 {
		appendIf(event.Query{Items: []event.QueryItem{{Tags: []string{"order:" + strconv.Itoa(i)}}}})
	}
	if n := len(s.dyn); n != 1 {
		t.Fatalf("%d condition statements prepared for one shape, want 1", n)
	}
	appendIf(event.Query{Items: []event.QueryItem{{Types: []string{"x"}, Tags: []string{"a", "b"}}}})
	if n := len(s.dyn); n != 2 {
		t.Fatalf("%d condition statements prepared for two shapes, want 2", n)
	}
	for i := range maxDynStmts + 5 {
		// Shapes with 1, 2, … types: each its own text.
		types := make([]string, i+3)
		for k := range types {
			types[k] = "t" + strconv.Itoa(k)
		}
		appendIf(event.Query{Items: []event.QueryItem{{Types: types}}})
	}
	if n := len(s.dyn); n != maxDynStmts {
		t.Fatalf("%d condition statements kept, want the bound %d", n, maxDynStmts)
	}
}

// TestRenewalIsNotAWrite_I3_I6: a lease this store acquired is renewed in
// memory (no commit on the single writer: a thousand boundaries renewed 300
// leases a second, docs/performance.md "Scale"), and every reader of the
// lease sees the renewed expiry: LeaseHolder, BoundaryStates, and another
// holder's AcquireLease, refused until that expiry. The term is what fences
// the checkpoint, and it is in the row: once the lease expires and another
// holder takes the next term, the old term's renewal and checkpoint are
// refused (I3, I6).
func TestRenewalIsNotAWrite_I3_I6(t *testing.T) {
	s := setup(t, Config{})
	ctx := t.Context()
	backendtest.Create(t, s, "orders")
	if _, err := s.Append(ctx, "orders", backendtest.Prepared(t, "orders", 2), nil); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	rowExpiry := func() int64 {
		t.Helper()
		var ms int64
		if err := s.rdb.QueryRow(`SELECT expires_at FROM leases WHERE boundary = 'orders'`).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}

	l, err := s.AcquireLease(ctx, "orders", "a", nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	written := rowExpiry()
	if written != l.Expires.UnixMilli() {
		t.Fatalf("row expiry %d after acquisition, want %d", written, l.Expires.UnixMilli())
	}
	advance(8 * time.Second)
	r, err := s.RenewLease(ctx, l, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowExpiry(); got != written {
		t.Fatalf("row expiry %d after a renewal, want %d unchanged (renewed in memory)", got, written)
	}
	advance(5 * time.Second) // past the row's expiry, within the renewed one
	held, err := s.LeaseHolder(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	states, err := s.BoundaryStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !held.Expires.Equal(r.Expires) || len(states) != 1 || !states[0].Lease.Expires.Equal(r.Expires) {
		t.Fatalf("LeaseHolder %+v, states %+v: want the renewed expiry %s", held, states, r.Expires)
	}
	if cur, err := s.AcquireLease(ctx, "orders", "b", nil, 10*time.Second); !errors.Is(err, event.ErrLeaseHeld) || cur.Term != l.Term {
		t.Fatalf("another holder's acquisition within the renewed lease: %+v, %v; want ErrLeaseHeld by term %d", cur, err, l.Term)
	}
	if err := s.SaveCheckpoint(ctx, "orders", r, 1); err != nil {
		t.Fatalf("checkpoint under the renewed lease: %v", err)
	}

	advance(11 * time.Second) // the renewed lease expires
	b, err := s.AcquireLease(ctx, "orders", "b", nil, 10*time.Second)
	if err != nil || b.Term != l.Term+1 {
		t.Fatalf("acquisition after expiry: %+v, %v; want term %d", b, err, l.Term+1)
	}
	if _, err := s.RenewLease(ctx, r, 10*time.Second); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("renewal of the old term: %v, want ErrLeaseLost", err)
	}
	if err := s.SaveCheckpoint(ctx, "orders", r, 2); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("checkpoint of the old term: %v, want ErrLeaseLost (I3, I6)", err)
	}
	if cp, _ := s.Checkpoint(ctx, "orders"); cp != 1 {
		t.Fatalf("checkpoint %d, want 1", cp)
	}
}

// TestNextGroupExpectsTheCallersOfTheLast: with a group delay, the next
// group waits for the requests that arrived while the last group committed
// and for the last group's callers, who come back once answered. Counting
// only the last group's own requests, closed-loop callers kept splitting
// into alternating groups, and a lone caller coming back after a group of
// three waited the whole delay.
func TestNextGroupExpectsTheCallersOfTheLast(t *testing.T) {
	s := setup(t, Config{GroupDelay: 10 * time.Second})
	backendtest.Create(t, s, "orders")
	release, first := stall(t, s, "orders", 1)
	appendAsync := func() <-chan backendtest.Outcome {
		return backendtest.AppendAsync(context.Background(), s, "orders", backendtest.Prepared(t, "orders", 1), nil)
	}
	var outs []<-chan backendtest.Outcome
	for range 3 {
		outs = append(outs, appendAsync())
	}
	testutil.Eventually(t, "three requests wait behind the stalled group", 10*time.Second, time.Millisecond, func() bool { return s.waiting.Load() == 3 })
	groups := s.groups.Load()
	release()
	if o := <-first; o.Err != nil {
		t.Fatalf("stalled append: %v", o.Err)
	}
	// Its caller comes back at once, as a closed-loop caller does.
	outs = append(outs, appendAsync())
	seen := map[uint64]bool{}
	for i, out := range outs {
		select {
		case r := <-out:
			if r.Err != nil {
				t.Fatalf("append %d: %v", i, r.Err)
			}
			seen[r.Res.First] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("append %d never answered", i)
		}
	}
	if len(seen) != 4 || !seen[2] || !seen[5] {
		t.Fatalf("the four appends are at positions %v, want 2..5", seen)
	}
	if n := s.groups.Load() - groups; n != 1 {
		t.Fatalf("the three waiting requests and the returning caller committed in %d groups, want 1", n)
	}
}

// TestStatementsPrepared: an append of a few events, a checkpoint, and a
// page read forward, a page read backward and a read-latest without a
// query run only statements prepared at Open: none is parsed again (the
// store counts the statements its transactions run as text). And the
// texts the code builds for runs of up to maxCachedRows events and for a
// full chunk are among the writer's prepared ones.
func TestStatementsPrepared(t *testing.T) {
	s := setup(t, Config{})
	ctx := context.Background()
	backendtest.Create(t, s, "b")
	l, err := s.AcquireLease(ctx, "b", "n1", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	parsed := s.stmtUse.parsed.Load()
	if _, err := s.Append(ctx, "b", backendtest.Prepared(t, "b", 3), nil); err != nil {
		t.Fatal(err)
	}
	prepared := s.stmtUse.prepared.Load()
	if err := s.SaveCheckpoint(ctx, "b", l, 2); err != nil {
		t.Fatal(err)
	}
	if n := s.stmtUse.prepared.Load() - prepared; n != 1 {
		t.Fatalf("the checkpoint ran %d prepared statements, want 1", n)
	}
	prepared = s.stmtUse.prepared.Load()
	if _, events, err := s.Read(ctx, "b", 0, 10, nil); err != nil || len(events) != 3 {
		t.Fatalf("read: %d events, %v", len(events), err)
	}
	if _, events, err := s.ReadBackward(ctx, "b", 0, 10, nil); err != nil || len(events) != 3 || events[0].Position != 3 {
		t.Fatalf("read backward: %+v, %v", events, err)
	}
	if l, err := s.Latest(ctx, "b", nil); err != nil || l.Event == nil || l.Event.Position != 3 {
		t.Fatalf("read latest: %+v, %v", l, err)
	}
	// Each read: its epoch and head, then its page (or its latest).
	if n := s.stmtUse.prepared.Load() - prepared; n != 6 {
		t.Fatalf("the three reads ran %d prepared statements, want 6", n)
	}
	if n := s.stmtUse.parsed.Load() - parsed; n != 0 {
		t.Fatalf("%d statements ran as text, want none", n)
	}
	// A read with a query runs as text (its statement depends on the
	// query): the count sees it.
	q := &event.Query{Items: []event.QueryItem{{Types: []string{"test.event"}}}}
	if _, _, err := s.Read(ctx, "b", 0, 10, q); err != nil {
		t.Fatal(err)
	}
	if s.stmtUse.parsed.Load() == parsed {
		t.Fatal("a read with a query counted no statement run as text")
	}
	for n := 1; n <= maxCachedRows; n++ {
		for _, text := range []string{insertSQL.text(n), findIDsSQL.text(n)} {
			if s.stmts[text] == nil {
				t.Fatalf("the statement for %d events is not prepared: %.60q", n, text)
			}
		}
	}
	for _, text := range []string{insertSQL.text(insertChunk), findIDsSQL.text(idChunk)} {
		if s.stmts[text] == nil {
			t.Errorf("the statement of a full chunk is not prepared: %.60q", text)
		}
	}
}
