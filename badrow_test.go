package orisun_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// TestBadRowNamed_I1_I4: rows changed behind orisun's back, on a running
// node, on both backends. A deleted row fails every read that reaches it
// (the API, the Go client, subscriptions from 0 through the client and the
// node: each delivers the events before it and ends with an error naming
// the position) instead of being skipped (I1). A bad row the publisher has
// not published yet (SQLite: data that is not JSON; PostgreSQL, whose json
// columns refuse that: a position missing) stalls the boundary's publisher
// with a reason naming the boundary, the position and the column, publishes
// nothing past it (I4), and appends go on meanwhile. A row moved past the
// head stalls the publisher too, and every append that reaches it is
// refused with corrupt naming it, never conflict. Each repair brings
// everything back.
func TestBadRowNamed_I1_I4(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			logs := &logCounter{}
			dir := t.TempDir()
			url := ""
			n := setup(t, dir, func(c *orisun.Config) {
				withHTTP(c)
				c.PollBackstop = 200 * time.Millisecond
				if backend == "postgres" {
					url = pgtest.URL(t)
					c.Backend, c.PGURL = "postgres", url
				}
			}, orisun.WithLogger(slog.New(logs)))
			db := openRaw(t, backend, dir, url)
			badRows(t, n, db, logs)
		})
	}
}

func badRows(t *testing.T, n *orisun.Node, db *rawDB, logs *logCounter) {
	ctx := context.Background()
	c := natstest.Client(t, n.NATSURL())
	appendSettled(t, ctx, n, events(5, "ok", 32), 30*time.Second)

	// 1. A published row deleted: every read that reaches it names it.
	db.exec(t, "CREATE TABLE saved AS SELECT * FROM "+db.events+" WHERE boundary = 'default' AND position = 3")
	db.exec(t, "DELETE FROM "+db.events+" WHERE boundary = 'default' AND position = 3")
	_, err := c.Read(ctx, "default", 0, 100, nil)
	wantBadRow(t, "client.Read over the API", err, 3, "position")
	if _, _, err := n.Read(ctx, "default", 0, 100, nil); err == nil {
		t.Fatal("Node.Read served a page with position 3 deleted")
	}
	if res, err := c.Read(ctx, "default", 3, 100, nil); err != nil || len(res.Events) != 2 {
		t.Fatalf("a read after the hole: %+v, %v; want positions 4 and 5", res, err)
	}
	wantSubscriptionsEnd(t, c, n, 3, 2, "position")
	db.exec(t, "INSERT INTO "+db.events+" SELECT * FROM saved")
	if res, err := c.Read(ctx, "default", 0, 100, nil); err != nil || len(res.Events) != 5 {
		t.Fatalf("read after the row was restored: %d events, %v; want 5", len(res.Events), err)
	}

	// 2. A bad row in the middle of unpublished events: good rows at 6
	// and 7, the bad one at 8, a good one at 9, written behind orisun's
	// back in one transaction, then two appends (10, 11). The publisher
	// publishes 6 and 7 and stops at 8, naming it; appends go on. A read
	// that reaches the row fails the same way however often it is sent,
	// and the node logs it once.
	column := db.unpublishable(t)
	if _, err := n.Append(ctx, "default", events(2, "later", 32), nil); err != nil {
		t.Fatalf("append while a bad row waits to be published: %v", err)
	}
	// The checkpoint of what was published before the stall is written
	// in the background: published reaches 7 a moment after the state
	// turns stalled, and never passes it.
	s := waitState(t, n, "default", "stalled", 30*time.Second, func(b orisun.BoundaryStatus) bool {
		return b.Head == 11 && b.Published >= 7
	})
	for _, want := range []string{`boundary "default"`, "position 8", "column " + column} {
		if !strings.Contains(s.Reason, want) {
			t.Fatalf("stalled reason %q does not name %s", s.Reason, want)
		}
	}
	if s.Published != 7 {
		t.Fatalf("published %d with good rows at 6 and 7 and a bad row at 8: want 7 (everything before the bad row, nothing past it)", s.Published)
	}
	t.Logf("stalled reason: %s", s.Reason)
	logged := logs.count("api request failed")
	for range 20 {
		_, err = c.Read(ctx, "default", 5, 100, nil)
		wantBadRow(t, "client.Read over the API", err, 8, column)
	}
	if got := logs.count("api request failed") - logged; got != 1 {
		t.Fatalf("20 reads of one bad row logged \"api request failed\" %d times, want once", got)
	}
	st, err := jsOf(t, n).Stream(ctx, stream.Name("default"))
	if err != nil {
		t.Fatal(err)
	}
	if last := st.CachedInfo().State.LastSeq; last != 7 {
		t.Fatalf("the stream with a bad row at 8: last %d, want 7", last)
	}
	if got := logs.count("publisher stalled"); got != 1 {
		t.Fatalf("\"publisher stalled\" logged %d times, want once", got)
	}
	db.repair(t)
	waitState(t, n, "default", "leading", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 11 })

	// 3. The last row moved past the head (11 to 12): the publisher stops
	// at it, and every append that reaches it is refused, naming it, as
	// corrupt, not as a conflict.
	db.exec(t, "UPDATE "+db.events+" SET position = 12 WHERE boundary = 'default' AND position = 11")
	s = waitState(t, n, "default", "stalled", 30*time.Second, nil)
	if !strings.Contains(s.Reason, "position 12") || !strings.Contains(s.Reason, "beyond the boundary's head 11") {
		t.Fatalf("stalled reason %q does not name the row beyond the head", s.Reason)
	}
	t.Logf("stalled reason: %s", s.Reason)
	for _, cond := range []*event.Condition{nil, {After: 11}} {
		_, err = c.Append(ctx, "default", events(1, "refused", 32), cond)
		wantBadRow(t, "client.Append", err, 12, "position")
		if errors.Is(err, event.ErrConflict) || !strings.Contains(err.Error(), "beyond the boundary's head 11") {
			t.Fatalf("client.Append into the row beyond the head: %v; want corrupt saying so, never conflict", err)
		}
		t.Logf("client.Append (condition %v) refused: %v", cond, err)
	}
	if _, err := n.Append(ctx, "default", events(1, "refused", 32), nil); !errors.Is(err, event.ErrCorrupt) {
		t.Fatalf("Node.Append into the row beyond the head: %v; want event.ErrCorrupt", err)
	}
	db.exec(t, "UPDATE "+db.events+" SET position = 11 WHERE boundary = 'default' AND position = 12")
	if _, err := c.Append(ctx, "default", events(1, "after", 32), nil); err != nil {
		t.Fatalf("append after the repair: %v", err)
	}
	waitState(t, n, "default", "leading", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 12 })
	var got []uint64
	if err := subscribeUntil(ctx, c, 12, &got); err != nil || len(got) != 12 {
		t.Fatalf("subscription after the repairs: %v, %v; want positions 1 to 12", got, err)
	}

	// 4. A stray row far beyond the head (1012, head 12), then two
	// appends (13, 14) before it: the publisher publishes them and stops
	// at the stray row, named as beyond the head (not as a position 15
	// missing, which was never written); subscriptions deliver every
	// event up to the head and end there, naming it.
	db.exec(t, "INSERT INTO "+db.events+" (boundary, position, id, type, time, tags, data) SELECT boundary, 1012, "+
		db.newID+", 'raw.stray', time, tags, data FROM "+db.events+" WHERE boundary = 'default' AND position = 12")
	s = waitState(t, n, "default", "stalled", 30*time.Second, nil)
	if !strings.Contains(s.Reason, "position 1012") || !strings.Contains(s.Reason, "beyond the boundary's head 12") {
		t.Fatalf("stalled reason %q does not name the stray row beyond the head", s.Reason)
	}
	if _, err := n.Append(ctx, "default", events(2, "before_stray", 32), nil); err != nil {
		t.Fatalf("append with a stray row far beyond the head: %v", err)
	}
	s = waitState(t, n, "default", "stalled", 30*time.Second, func(b orisun.BoundaryStatus) bool {
		return b.Published == 14 && strings.Contains(b.Reason, "beyond the boundary's head 14")
	})
	if !strings.Contains(s.Reason, "position 1012") || strings.Contains(s.Reason, "position 15") {
		t.Fatalf("stalled reason %q: want the stray row 1012 named beyond the head, no position 15", s.Reason)
	}
	t.Logf("stalled reason: %s", s.Reason)
	_, err = c.Read(ctx, "default", 12, 100, nil)
	wantBadRow(t, "client.Read over the API", err, 1012, "position")
	wantSubscriptionsEnd(t, c, n, 1012, 14, "position")
	db.exec(t, "DELETE FROM "+db.events+" WHERE boundary = 'default' AND position = 1012")
	waitState(t, n, "default", "leading", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 14 })
}

// wantBadRow wants err to be the corrupt error naming the row of boundary
// default at pos.
func wantBadRow(t *testing.T, what string, err error, pos uint64, column string) {
	t.Helper()
	var ce *event.CorruptError
	var apiErr *api.Error
	switch {
	case err == nil:
		t.Fatalf("%s: no error; the bad row at position %d was served or skipped", what, pos)
	case !errors.Is(err, event.ErrCorrupt) || !errors.As(err, &ce):
		t.Fatalf("%s: %v; want event.ErrCorrupt with an *event.CorruptError", what, err)
	case ce.Boundary != "default" || ce.Position != pos || ce.Column != column:
		t.Fatalf("%s: %v names %q position %d column %q; want \"default\", %d, %q", what, err, ce.Boundary, ce.Position, ce.Column, pos, column)
	case errors.As(err, &apiErr) && apiErr.Code != api.CodeCorrupt:
		t.Fatalf("%s: code %q, want %q", what, apiErr.Code, api.CodeCorrupt)
	case !strings.Contains(err.Error(), fmt.Sprintf("position %d", pos)):
		t.Fatalf("%s: the message %q does not name position %d", what, err, pos)
	}
}

// wantSubscriptionsEnd wants a subscription of the client and one of the
// node, from 0, each to end at the bad row at pos (wantSubscriptionEnds).
func wantSubscriptionsEnd(t *testing.T, c *client.Client, n *orisun.Node, pos, last uint64, column string) {
	t.Helper()
	wantSubscriptionEnds(t, "client.Subscribe", func(ctx context.Context, h event.Handler) error {
		return c.Subscribe(ctx, "default", 0, h, client.SubscribeOptions{})
	}, pos, last, column)
	wantSubscriptionEnds(t, "Node.Subscribe", func(ctx context.Context, h event.Handler) error {
		return n.Subscribe(ctx, "default", 0, h, orisun.SubscribeOptions{})
	}, pos, last, column)
}

// wantSubscriptionEnds subscribes from 0 and wants the events 1 to last
// (every one before the bad row at pos), then an error naming it, within
// 10 seconds.
func wantSubscriptionEnds(t *testing.T, what string, subscribe func(context.Context, event.Handler) error, pos, last uint64, column string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []uint64
	err := subscribe(ctx, func(_ context.Context, e event.Event) error {
		got = append(got, e.Position)
		return nil
	})
	if ctx.Err() != nil {
		t.Fatalf("%s from 0 delivered %v and did not end within 10 s: a bad row at position %d must end it, named", what, got, pos)
	}
	var ce *event.CorruptError
	if !errors.As(err, &ce) || ce.Position != pos || ce.Column != column {
		t.Fatalf("%s from 0 ended with %v; want the *event.CorruptError of position %d, column %s", what, err, pos, column)
	}
	want := []uint64{}
	for p := uint64(1); p <= last; p++ {
		want = append(want, p)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s from 0 delivered %v before ending, want %v (every event before the bad row)", what, got, want)
	}
	t.Logf("%s ended: %v", what, err)
}

// subscribeUntil subscribes from 0 until position last was delivered.
func subscribeUntil(ctx context.Context, c *client.Client, last uint64, got *[]uint64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := errors.New("done")
	err := c.Subscribe(ctx, "default", 0, func(_ context.Context, e event.Event) error {
		*got = append(*got, e.Position)
		if e.Position == last {
			return done
		}
		return nil
	}, client.SubscribeOptions{})
	if errors.Is(err, done) {
		return nil
	}
	return err
}

// rawDB is the node's database, edited behind its back.
type rawDB struct {
	exec   func(t *testing.T, query string)
	events string // the events table
	newID  string // an SQL expression of a new event id
	// unpublishable appends good rows at positions 6 and 7, a bad row at
	// 8 and a good one at 9 (the head), and says which column names the
	// bad one; repair repairs it.
	unpublishable func(t *testing.T) (column string)
	repair        func(t *testing.T)
}

func openRaw(t *testing.T, backend, dir, url string) *rawDB {
	if backend == "postgres" {
		conn := pgtest.Connect(t, url)
		exec := func(t *testing.T, query string) {
			t.Helper()
			if _, err := conn.Exec(context.Background(), query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		}
		return &rawDB{exec: exec, events: "orisun_events", newID: "gen_random_uuid()",
			// A hole: the head moves by four, every position but the
			// third gets a row (json columns refuse text that is not
			// JSON).
			unpublishable: func(t *testing.T) string {
				exec(t, `WITH h AS (UPDATE orisun_boundaries SET head = head + 4 WHERE name = 'default' RETURNING head)
INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
SELECT 'default', h.head - k, gen_random_uuid(), 'raw.around_hole', now(), '{}', '{}'::json FROM h, (VALUES (0), (2), (3)) AS v(k)`)
				return "position"
			},
			repair: func(t *testing.T) {
				exec(t, `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ('default', 8, gen_random_uuid(), 'raw.fill', now(), '{}', '{}')`)
			},
		}
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlite.DBFile)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := func(t *testing.T, query string) {
		t.Helper()
		if _, err := db.Exec(query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	return &rawDB{exec: exec, events: "events", newID: "'" + uuid.NewString() + "'",
		unpublishable: func(t *testing.T) string {
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			good := func(back int) string {
				return fmt.Sprintf(`INSERT INTO events (boundary, position, id, type, time, tags, data)
SELECT 'default', head - %d, '%s', 'raw.good', 0, '[]', '{}' FROM boundaries WHERE name = 'default'`, back, uuid.NewString())
			}
			for _, q := range []string{
				`UPDATE boundaries SET head = head + 4 WHERE name = 'default'`,
				good(3), good(2),
				`INSERT INTO events (boundary, position, id, type, time, tags, data)
SELECT 'default', head - 1, '` + uuid.NewString() + `', 'raw.bad', 0, '[]', '{"broken":' FROM boundaries WHERE name = 'default'`,
				good(0),
			} {
				if _, err := tx.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			return "data"
		},
		repair: func(t *testing.T) {
			exec(t, `UPDATE events SET data = '{"repaired":true}' WHERE boundary = 'default' AND position = 8`)
		},
	}
}

// TestNATSMonitor: ORISUN_NATS_MONITOR_ADDR with a port alone turns the
// embedded server's monitoring on, on loopback; /jsz shows orisun's stream
// and /healthz the server healthy. Without it there is none.
func TestNATSMonitor(t *testing.T) {
	t.Parallel()
	n := setup(t, "", func(c *orisun.Config) { c.NATSMonitorAddr = "0" })
	base := n.NATSMonitorURL()
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("NATSMonitorURL = %q, want loopback", base)
	}
	if _, err := n.Append(context.Background(), "default", events(3, "ok", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	for _, c := range []struct{ path, want string }{
		{"/jsz?accounts=true&streams=true", `"name":"ORISUN_default"`},
		{"/healthz", `"status":"ok"`},
		{"/varz", `"jetstream"`},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		compact := strings.Join(strings.Fields(string(body)), "")
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(compact, c.want) {
			t.Fatalf("GET %s: %d %v; want %s in:\n%.2000s", c.path, resp.StatusCode, err, c.want, body)
		}
	}
	if off := setup(t, "", nil); off.NATSMonitorURL() != "" {
		t.Fatalf("NATSMonitorURL without ORISUN_NATS_MONITOR_ADDR = %q, want none", off.NATSMonitorURL())
	}
}

// TestStatusCaughtUpIsWhatThePublisherSaw_I7: a commit the publisher is not
// told of (written behind orisun's back here; a lost notification is the
// same to it) leaves the idle publisher's "caught up" stale until its poll
// (an hour here). The status measures the head beyond it and says so, never
// "every committed event is published", and is not settled.
func TestStatusCaughtUpIsWhatThePublisherSaw_I7(t *testing.T) {
	dir := t.TempDir()
	n := setup(t, dir, func(c *orisun.Config) {
		c.PollInterval, c.PollBackstop = time.Hour, time.Hour
	})
	ctx := context.Background()
	appendSettled(t, ctx, n, events(3, "told", 32), 30*time.Second)
	db := openRaw(t, "sqlite", dir, "")
	db.exec(t, `UPDATE boundaries SET head = head + 1 WHERE name = 'default'`)
	db.exec(t, `INSERT INTO events (boundary, position, id, type, time, tags, data)
SELECT 'default', head, `+db.newID+`, 'raw.untold', 0, '[]', '{}' FROM boundaries WHERE name = 'default'`)
	st := testutil.Get(t, n.Status)
	b := st.Boundaries[0]
	if b.Head != 4 || b.Published != 3 || st.Settled {
		t.Fatalf("status after an untold commit: head %d, published %d, settled %v; want 4, 3, false", b.Head, b.Published, st.Settled)
	}
	if strings.Contains(b.Reason, "every committed event is published") ||
		!strings.Contains(b.Reason, "caught up to position 3") || !strings.Contains(b.Reason, "the head is 4 now") {
		t.Fatalf("reason %q: want the position the publisher saw and the head measured", b.Reason)
	}
}
