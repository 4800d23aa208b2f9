package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// The outcomes of a group transaction at its edges: a COMMIT that fails, a
// lookup after a COMMIT that fails, a boundary created while an append to
// it runs, and a group that writes nothing. Each test holds the requests
// in one group (holdGroups) and makes the failure happen for real, with a
// trigger in the database.

// failAtCommit installs a deferred trigger that makes the COMMIT of any
// transaction that inserted an event whose data has the key "boom" fail.
func failAtCommit(t *testing.T, s *Store) {
	t.Helper()
	conn := connect(t, s)
	_, err := conn.Exec(context.Background(), `
CREATE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.data::jsonb ? 'boom' THEN RAISE EXCEPTION 'boom at commit'; END IF; RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER test_boom AFTER INSERT ON orisun_events DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION test_boom();`)
	if err != nil {
		t.Fatal(err)
	}
}

// TestRetryInAGroupWhoseCommitFails: a request retrying the events of an
// earlier request of the same group is judged against that request's
// uncommitted write; when the COMMIT fails, the retry must fail with it, not
// answer positions nothing holds. With a request without a condition after
// them, the COMMIT rides in the first batch; without, it is sent apart.
func TestRetryInAGroupWhoseCommitFails(t *testing.T) {
	for _, tail := range []bool{false, true} {
		t.Run(fmt.Sprintf("tail=%v", tail), func(t *testing.T) {
			s := setup(t, Config{})
			backendtest.Create(t, s, "orders")
			failAtCommit(t, s)
			a := backendtest.Prepared(t, "orders", 1)
			a[0].Data = []byte(`{"boom":true}`)
			queued, release := s.holdGroups("orders")
			outs := []<-chan backendtest.Outcome{backendtest.AppendAsync(context.Background(), s, "orders", a, nil)}
			testutil.Eventually(t, "first queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 1 })
			outs = append(outs, backendtest.AppendAsync(context.Background(), s, "orders", append(a[:0:0], a...), nil))
			testutil.Eventually(t, "retry queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 2 })
			if tail {
				outs = append(outs, backendtest.AppendAsync(context.Background(), s, "orders", backendtest.Prepared(t, "orders", 1), nil))
				testutil.Eventually(t, "tail queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 3 })
			}
			release()
			for i, o := range outs {
				if r := <-o; r.Err == nil {
					t.Errorf("request %d answered written at %d..%d, but the group's COMMIT failed", i, r.Res.First, r.Res.Last)
				}
			}
			if evs := backendtest.ReadAll(t, s, "orders"); len(evs) != 0 {
				t.Fatalf("%d events stored after a failed COMMIT", len(evs))
			}
		})
	}
}

// TestLookupAfterCommitFails: a group commits in its first batch while a
// conditional request in it matched; that request's lookups run after the
// COMMIT. When they fail, the committed request keeps its success (its
// events are stored) and only the undecided one gets the error.
func TestLookupAfterCommitFails(t *testing.T) {
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	conn := connect(t, s)
	// At COMMIT, an event with "poison" breaks the session's search_path:
	// every statement after the commit on that connection fails.
	_, err := conn.Exec(context.Background(), `
CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.data::jsonb ? 'poison' THEN PERFORM set_config('search_path', 'nowhere', false); END IF; RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER test_poison AFTER INSERT ON orisun_events DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION test_poison();`)
	if err != nil {
		t.Fatal(err)
	}
	seed := backendtest.Prepared(t, "orders", 1)
	seed[0].Tags = []string{"seed"}
	if _, err := s.Append(context.Background(), "orders", seed, nil); err != nil {
		t.Fatal(err)
	}
	cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"seed"}}}}, After: 0}
	written := backendtest.Prepared(t, "orders", 1)
	written[0].Data = []byte(`{"poison":true}`)
	queued, release := s.holdGroups("orders")
	oc := backendtest.AppendAsync(context.Background(), s, "orders", backendtest.Prepared(t, "orders", 1), cond)
	testutil.Eventually(t, "conditional queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 1 })
	ow := backendtest.AppendAsync(context.Background(), s, "orders", written, nil)
	testutil.Eventually(t, "unconditional queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == 2 })
	release()
	rc, rw := <-oc, <-ow
	if rw.Err != nil || rw.Res.First != 2 {
		t.Fatalf("the committed request: %+v, %v; want success at position 2", rw.Res, rw.Err)
	}
	if rc.Err == nil {
		t.Fatalf("the conditional request whose lookups failed: %+v, want an error", rc.Res)
	}
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM orisun_events WHERE id = $1`, written[0].ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the committed event is stored %d times (%v), want once", n, err)
	}
}

// TestAppendRacingCreateBoundary: an append racing the creation of its
// boundary is either written (and answered with its positions) or answered
// ErrNotFound with nothing stored; never "not found" with its events
// committed. The head-row lock can miss a boundary that the append
// statement, with a later snapshot, finds.
func TestAppendRacingCreateBoundary(t *testing.T) {
	s := setup(t, Config{})
	written, notFound := 0, 0
	for i := range 300 {
		name := fmt.Sprintf("b%d", i)
		in := backendtest.Prepared(t, name, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = s.CreateBoundary(context.Background(), name)
		}()
		res, err := s.Append(context.Background(), name, in, nil)
		<-done
		evs := backendtest.ReadAll(t, s, name)
		switch {
		case err == nil:
			written++
			if len(evs) != 1 || res.First != 1 {
				t.Fatalf("%s: answered %+v, %d events stored", name, res, len(evs))
			}
		case errors.Is(err, event.ErrNotFound):
			notFound++
			if len(evs) != 0 {
				t.Fatalf("%s: answered %v, yet %d events are stored", name, err, len(evs))
			}
		default:
			t.Fatalf("%s: %v", name, err)
		}
	}
	t.Logf("%d written, %d not found", written, notFound)
}

// TestConflictOnlyGroupCommitsNothing: a group whose requests all have
// conditions that match writes nothing: no COMMIT, and no notification
// wakes the publishers.
func TestConflictOnlyGroupCommitsNothing(t *testing.T) {
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	seed := backendtest.Prepared(t, "orders", 1)
	seed[0].Tags = []string{"seed"}
	if _, err := s.Append(context.Background(), "orders", seed, nil); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, s)
	if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{notifyChannel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"seed"}}}}, After: 0}
	var ce *event.ConflictError
	if _, err := s.Append(context.Background(), "orders", backendtest.Prepared(t, "orders", 1), cond); !errors.As(err, &ce) || ce.Position != 1 {
		t.Fatalf("conditional append: %v, want a conflict at position 1", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n, err := conn.WaitForNotification(ctx); err == nil {
		t.Fatalf("a notification for %q arrived although nothing was written", n.Payload)
	}
}

// TestGroupIsOneRoundTrip: a group whose requests all write (a run without
// conditions and a request with a condition that holds) sends one batch:
// BEGIN, the lock, the appends, the NOTIFY and the COMMIT together. A
// group of conditional requests only commits in a batch of its own.
func TestGroupIsOneRoundTrip(t *testing.T) {
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	group := func(conds []*event.Condition) int64 {
		t.Helper()
		queued, release := s.holdGroups("orders")
		var outs []<-chan backendtest.Outcome
		for i, c := range conds {
			outs = append(outs, backendtest.AppendAsync(context.Background(), s, "orders", backendtest.Prepared(t, "orders", 1), c))
			testutil.Eventually(t, "request queued", 20*time.Second, 2*time.Millisecond, func() bool { return queued() == i+1 })
		}
		before, groups := s.batches.Load(), s.groups.Load()
		release()
		for _, o := range outs {
			if r := <-o; r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if n := s.groups.Load() - groups; n != 1 {
			t.Fatalf("%d groups, want 1", n)
		}
		return s.batches.Load() - before
	}
	holds := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"nothing"}}}}, After: 0}
	if n := group([]*event.Condition{nil, nil, holds}); n != 1 {
		t.Fatalf("a group with appends without conditions sent %d batches, want 1", n)
	}
	if n := group([]*event.Condition{holds, holds}); n != 2 {
		t.Fatalf("a group of conditional appends sent %d batches, want 2 (the appends, then the COMMIT)", n)
	}
}

// TestNextGroupBeginsWhileFirstCommits: once a group holds its boundary's
// head row, the next group of that boundary begins on another connection
// and commits right after it, without waiting for the first group's
// answers to come back. The first group's goroutine is held (lockedHook)
// just after it took the head row; its statements, COMMIT included, are
// already with the database. A second append must still complete, after
// the first in position order. Without the hand-over at the lock, the
// second append waits for the first group to end and the test fails.
func TestNextGroupBeginsWhileFirstCommits(t *testing.T) {
	s := setup(t, Config{})
	backendtest.Create(t, s, "orders")
	entered := make(chan struct{})
	unblock := make(chan struct{})
	var first atomic.Bool
	s.mu.Lock()
	s.lockedHook = func(string) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-unblock
		}
	}
	s.mu.Unlock()
	defer func() {
		select {
		case <-unblock:
		default:
			close(unblock)
		}
	}()

	out1 := backendtest.AppendAsync(context.Background(), s, "orders", backendtest.Prepared(t, "orders", 1), nil)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first group never took the head row")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out2 := backendtest.AppendAsync(ctx, s, "orders", backendtest.Prepared(t, "orders", 2), nil)
	r2 := <-out2
	if r2.Err != nil {
		t.Fatalf("second append, while the first group's goroutine is held after its lock: %v", r2.Err)
	}
	if r2.Res.First != 2 || r2.Res.Last != 3 {
		t.Fatalf("second append at %d..%d, want 2..3 (after the first group)", r2.Res.First, r2.Res.Last)
	}
	select {
	case r1 := <-out1:
		t.Fatalf("the first append answered (%+v) while its group was held", r1)
	default:
	}
	close(unblock)
	r1 := <-out1
	if r1.Err != nil || r1.Res.First != 1 || r1.Res.Last != 1 {
		t.Fatalf("first append: %+v, want position 1", r1)
	}
	if evs := backendtest.ReadAll(t, s, "orders"); len(evs) != 3 {
		t.Fatalf("%d events stored, want 3", len(evs))
	}
}

// TestNextGroupExpectsTheCallersOfTheLast: with a group delay, the next
// group of a boundary waits for the requests that arrived while the last
// group ran and for the last group's callers, who come back once answered,
// so that a boundary's closed-loop callers keep committing together. When
// it expected only those that waited as the last group was formed, 64
// callers settled into two alternating groups of about 32, each paying the
// round trip and the flush (about 30,000 events/s in BenchmarkAppendMatrix
// against 38,000 with this).
func TestNextGroupExpectsTheCallersOfTheLast(t *testing.T) {
	s := setup(t, Config{GroupDelay: 10 * time.Second})
	backendtest.Create(t, s, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	release, first := stall(t, s, "orders", 1)
	var outs []<-chan backendtest.Outcome
	for range 3 {
		outs = append(outs, backendtest.AppendAsync(ctx, s, "orders", backendtest.Prepared(t, "orders", 1), nil))
	}
	testutil.Eventually(t, "three requests queued behind the stalled group", 20*time.Second, 2*time.Millisecond, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queues["orders"]) == 3
	})
	groups := s.groups.Load()
	release()
	if r := <-first; r.Err != nil || r.Res.First != 1 {
		t.Fatalf("stalled append: %+v, want position 1", r)
	}
	// Its caller comes back at once, as a closed-loop caller does.
	outs = append(outs, backendtest.AppendAsync(ctx, s, "orders", backendtest.Prepared(t, "orders", 1), nil))
	seen := map[uint64]bool{}
	for i, out := range outs {
		r := <-out
		if r.Err != nil {
			t.Fatalf("append %d: %v", i, r.Err)
		}
		seen[r.Res.First] = true
	}
	if len(seen) != 4 || !seen[2] || !seen[5] {
		t.Fatalf("the four appends are at positions %v, want 2..5", seen)
	}
	if n := s.groups.Load() - groups; n != 1 {
		t.Fatalf("the three waiting requests and the returning caller committed in %d groups, want 1", n)
	}
	backendtest.CheckDense(t, backendtest.ReadAll(t, s, "orders"))
}

// unwrapPresized is the value a presized bind value stands for (the ids,
// see encode.go), or v.
func unwrapPresized(v any) any {
	if p, ok := v.(presizer); ok {
		v, _ = p.presized()
	}
	return v
}

// TestEventColumnsIDs: ids go to the database as UUID values (a []string
// for uuid[] has no binary encoding in pgx); one not in the canonical form
// event.Prepare gives (from a caller that skipped it) goes as the text it
// is, for PostgreSQL to judge, never as a zero UUID.
func TestEventColumnsIDs(t *testing.T) {
	var cols eventColumns
	cols.add([]event.Input{{ID: "0190b0a0-0000-7000-8000-00000000000a", Data: []byte(`{}`)}, {ID: "00000000-0000-0000-0000-000000000000", Data: []byte(`1`)}})
	ids, ok := unwrapPresized(cols.args("b")[2]).([]pgtype.UUID)
	if !ok || len(ids) != 2 || !ids[0].Valid || ids[0].Bytes[0] != 0x01 || ids[0].Bytes[15] != 0x0a || !ids[1].Valid || ids[1].Bytes != ([16]byte{}) {
		t.Fatalf("ids %v, want the two UUIDs as values", cols.args("b")[2])
	}
	for _, odd := range []string{"not-a-uuid", "0190b0a000007000800000000000000a", "{0190b0a0-0000-7000-8000-00000000000a}", "0190B0A0-0000-7000-8000-00000000000A"} {
		var cols eventColumns
		cols.add([]event.Input{{ID: "0190b0a0-0000-7000-8000-00000000000a", Data: []byte(`{}`)}, {ID: odd, Data: []byte(`{}`)}})
		if text, ok := unwrapPresized(cols.args("b")[2]).([]string); !ok || len(text) != 2 || text[1] != odd {
			t.Errorf("with id %q: ids %v, want the text of both", odd, cols.args("b")[2])
		}
	}
}

// TestArrayLiteral: tags become an array literal PostgreSQL reads back as
// the same tags, whatever they hold (see TagsOfEachEventKept in the
// conformance suite for the round trip through an append).
func TestArrayLiteral(t *testing.T) {
	for _, c := range []struct {
		tags []string
		want string
	}{
		{nil, `{}`},
		{[]string{"a"}, `{"a"}`},
		{[]string{`a b`, `x"y`, `c\d`, `{1,2}`, `NULL`, `'`}, `{"a b","x\"y","c\\d","{1,2}","NULL","'"}`},
	} {
		if got := arrayLiteral(c.tags); got != c.want {
			t.Errorf("arrayLiteral(%q) = %s, want %s", c.tags, got, c.want)
		}
	}
}

// TestAppendInEveryQueryExecMode: a URL may choose pgx's query mode
// (default_query_exec_mode); appends, with and without conditions, and
// reads, with and without a query, work in each, the text-format ones included (exec and
// simple_protocol send every value as text: an id given as [16]byte or
// data as []byte has no text form there).
func TestAppendInEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	// The last: the default mode with pgx's description cache off, where
	// reads with a query cannot go as cache_describe (see unnamedMode).
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol", "cache_statement&description_cache_capacity=0"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			s := setup(t, Config{URL: url + sep + "default_query_exec_mode=" + mode})
			backendtest.Create(t, s, "orders")
			ctx := context.Background()
			in, err := event.Prepare("orders", []event.Input{
				{Type: "order.placed", Data: json.RawMessage(`{"note":"a \"quoted\" ü"}`), Tags: []string{`a b`, `x"y`, `c\d`, `{1,2}`}},
				{Type: "order.noted", Data: json.RawMessage(`[1,2]`), Metadata: json.RawMessage(`{"by":"t"}`)},
			}, event.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, "orders", in, nil); err != nil {
				t.Fatalf("append: %v", err)
			}
			q := event.Query{Items: []event.QueryItem{{Tags: []string{`x"y`}}}}
			more, _ := event.Prepare("orders", []event.Input{{Type: "order.paid", Data: json.RawMessage(`{}`), Tags: []string{"p"}}}, event.Limits{})
			var ce *event.ConflictError
			if _, err := s.Append(ctx, "orders", more, &event.Condition{Query: q, After: 0}); !errors.As(err, &ce) || ce.Position != 1 {
				t.Fatalf("conditional append that must conflict at 1: %v", err)
			}
			if res, err := s.Append(ctx, "orders", more, &event.Condition{Query: q, After: 1}); err != nil || res.First != 3 {
				t.Fatalf("conditional append that holds: %+v, %v", res, err)
			}
			got := backendtest.ReadAll(t, s, "orders")
			if len(got) != 3 {
				t.Fatalf("%d events stored, want 3", len(got))
			}
			// Reads with a query (sent unnamed in the default mode).
			if _, byTag, err := s.Read(ctx, "orders", 0, 10, &q); err != nil || len(byTag) != 1 || byTag[0].Position != 1 {
				t.Fatalf("read by tag: %d events, %v", len(byTag), err)
			}
			if _, byTag, err := s.ReadBackward(ctx, "orders", 0, 10, &q); err != nil || len(byTag) != 1 || byTag[0].Position != 1 {
				t.Fatalf("backward read by tag: %d events, %v", len(byTag), err)
			}
			if l, err := s.Latest(ctx, "orders", &q); err != nil || l.Event == nil || l.Event.Position != 1 || l.Head != 3 {
				t.Fatalf("latest by tag: %+v, %v", l, err)
			}
			for i, want := range append(in, more...) {
				e := got[i]
				if e.ID != want.ID || string(e.Data) != string(want.Data) || string(e.Metadata) != string(want.Metadata) ||
					fmt.Sprintf("%q", e.Tags) != fmt.Sprintf("%q", want.Tags) {
					t.Errorf("event %d read back as %+v, want %+v", i+1, e, want)
				}
			}
		})
	}
}

// TestArrayLiteralRoundTrip: PostgreSQL reads every literal arrayLiteral
// writes back as the same tags, for tags of every kind event.ValidateTag
// accepts.
func TestArrayLiteralRoundTrip(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	odd := []string{" ", "  lead", "trail  ", "a\tb", "a\nb", "a\rb", "\x01", "\x7f", "\u00a0", "\u2028", "\ufeff",
		`[1:2]={1}`, `NULL`, `null`, `""`, `\`, `\\"`, `{}`, `{`, `}`, `,`, `'`, "é日本🎉", strings.Repeat("x", event.MaxTagLen)}
	for _, tags := range [][]string{nil, {"a"}, odd, {odd[len(odd)-1], odd[0]}} {
		for _, tag := range tags {
			if err := event.ValidateTag(tag); err != nil {
				t.Fatalf("tag %q: %v (the test should use valid tags only)", tag, err)
			}
		}
		var got []string
		if err := s.pool.QueryRow(context.Background(), `SELECT $1::text[]`, arrayLiteral(tags)).Scan(&got); err != nil {
			t.Fatalf("%q as %s: %v", tags, arrayLiteral(tags), err)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", append([]string{}, tags...)) {
			t.Errorf("%q came back as %q", tags, got)
		}
	}
}
