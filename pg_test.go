package orisun_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestSlowAppenderMakesPublisherWait_I1_I4_I7: on PostgreSQL a transaction
// that holds a boundary's head row open (an appender that takes its time)
// makes the other appends and the publisher wait: nothing is skipped, the
// status says it is waiting, and once the transaction ends everything is
// published, densely.
func TestSlowAppenderMakesPublisherWait_I1_I4_I7(t *testing.T) {
	n, url := pgNode(t, 100*time.Millisecond)
	ctx := context.Background()
	appendSettled(t, ctx, n, events(5, "before", 16), 10*time.Second)

	// The slow appender: takes the head row as an append does, and holds it.
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := tx.Exec(ctx, `UPDATE orisun_boundaries SET head = head + 1 WHERE name = 'default'`); err != nil {
		t.Fatal(err)
	}
	appended := make(chan error, 1)
	go func() {
		_, err := n.Append(ctx, "default", events(3, "after", 16), nil)
		appended <- err
	}()
	reason := waitHeadHeld(t, n, func(b orisun.BoundaryStatus) {
		if b.Head != 5 || b.Published != 5 {
			t.Fatalf("head %d published %d while the slow appender holds the row: want 5, 5", b.Head, b.Published)
		}
	})
	t.Logf("status while held: %s", reason)
	testutil.NotYet(t, appended, "an append went through while the head row was held")
	testutil.Release(t, appended, func() error { return tx.Rollback(ctx) })
	st := waitSettled(t, n, 10*time.Second)
	if st.Boundaries[0].Head != 8 || strings.HasPrefix(st.Boundaries[0].Reason, "waiting") {
		t.Fatalf("after the slow appender: %+v", st.Boundaries[0])
	}
	if first, last := checkStream(t, n, "default"); first != 1 || last != 8 {
		t.Fatalf("stream %d..%d, want 1..8", first, last)
	}
}

// TestSubscriberOnDemotedNodeReadsStore_I5: a live subscription on a node
// that loses the lease to another node (each has its own NATS until the
// cluster issue, so nobody feeds the demoted node's stream any more) goes
// back to the store and delivers everything the new leader publishes,
// exactly once, instead of waiting on a dead stream.
func TestSubscriberOnDemotedNodeReadsStore_I5(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	pg := func(id string) func(*orisun.Config) {
		return func(c *orisun.Config) { c.Backend, c.PGURL, c.NodeID = "postgres", url, id }
	}
	a := setup(t, "", pg("node-a"))
	appendSettled(t, ctx, a, events(10, "x", 16), 10*time.Second)
	r := newRecorder(0)
	live := make(chan uint64, 4)
	stop := subscribe(t, a, "default", 0, r, orisun.SubscribeOptions{OnCaughtUp: func(n uint64) { live <- n }})
	select {
	case <-live:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription on node-a never went live")
	}
	b := setup(t, "", pg("node-b"))
	stB, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// node-b takes the lease, as after node-a was paused past it.
	conn := pgtest.Connect(t, url)
	if _, err := conn.Exec(ctx, `UPDATE orisun_leases SET holder = $1, term = term + 1,
expires_at = clock_timestamp() + interval '1 hour' WHERE boundary = 'default'`, stB.LeaseHolder); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "node-a to step down", 15*time.Second, 50*time.Millisecond, func() error {
		st, _ := a.Status(ctx)
		if len(st.Boundaries) == 1 && st.Boundaries[0].State == "standby" {
			return nil
		}
		return fmt.Errorf("status %+v", st)
	})
	appendSettled(t, ctx, b, events(10, "y", 16), 10*time.Second)
	waitDelivered(t, r, 20, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, a, "default", 0, r)
}

// TestUnreachablePostgresAtStart: a node whose database does not answer
// stops start-up with an error that names ORISUN_PG_URL (where to look) and
// says the store is unavailable, not an error of an anonymous "URL".
func TestUnreachablePostgresAtStart(t *testing.T) {
	n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), Backend: "postgres",
		PGURL: "postgres://orisun:s3cret@127.0.0.1:1/orisun?sslmode=disable&connect_timeout=5", NATSPort: -1, HTTPAddr: "off"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		n.Stop()
		t.Fatal("a node started on a database nothing listens for")
	}
	if !errors.Is(err, event.ErrUnavailable) || !strings.Contains(err.Error(), "ORISUN_PG_URL") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Start: %v; want ErrUnavailable naming ORISUN_PG_URL, without the password", err)
	}
	t.Logf("Start: %v", err)
}

// TestPollingPublishesWithoutNotification_I4: a commit whose notification
// never arrives (here: events written by plain SQL, with no pg_notify, as
// a commit whose NOTIFY the listener missed while reconnecting) is still
// published, by the poll: wake-ups are hints, the poll guarantees progress.
func TestPollingPublishesWithoutNotification_I4(t *testing.T) {
	n, url := pgNode(t, 300*time.Millisecond)
	ctx := context.Background()
	appendSettled(t, ctx, n, events(2, "notified", 16), 20*time.Second)

	// Three events appended the way the store appends them (the head row
	// drawn, the events inserted, one transaction), minus the NOTIFY.
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	var head int64
	if err := tx.QueryRow(ctx, `UPDATE orisun_boundaries SET head = head + 3 WHERE name = 'default' RETURNING head`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	for p := head - 2; p <= head; p++ {
		if _, err := tx.Exec(ctx, `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
VALUES ('default', $1, $2, 'unnotified', now(), '{}', '{}')`, p, event.NewID()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, n, 30*time.Second)
	if st.Boundaries[0].Head != 5 || st.Boundaries[0].Published != 5 {
		t.Fatalf("after an unnotified commit: head %d, published %d; want 5, 5", st.Boundaries[0].Head, st.Boundaries[0].Published)
	}
	if first, last := checkStream(t, n, "default"); first != 1 || last != 5 {
		t.Fatalf("stream %d..%d, want 1..5", first, last)
	}
}

// waitHeadHeld waits until n's status says that its first boundary waits
// for a transaction that holds the head row (a reason "waiting ..."), and
// returns that reason. each, when not nil, checks every status read
// meanwhile (it may fail the test).
func waitHeadHeld(t *testing.T, n *orisun.Node, each func(orisun.BoundaryStatus)) string {
	t.Helper()
	var reason string
	testutil.Until(t, "the status to say it waits for the head row", 10*time.Second, 20*time.Millisecond, func() error {
		b := testutil.Get(t, n.Status).Boundaries[0]
		if each != nil {
			each(b)
		}
		if reason = b.Reason; !strings.HasPrefix(reason, "waiting") {
			return fmt.Errorf("last reason %q", reason)
		}
		return nil
	})
	return reason
}

// pgNode starts a node (setup) on a fresh PostgreSQL database, polling
// every poll, and returns it with the database's URL.
func pgNode(t *testing.T, poll time.Duration) (*orisun.Node, string) {
	t.Helper()
	url := pgtest.URL(t)
	return setup(t, "", func(c *orisun.Config) {
		c.Backend, c.PGURL = "postgres", url
		c.PollInterval = poll
	}), url
}
