package orisun_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/status"
)

// TestEnqueueMoveBoundKeepsLease: a move that cannot end (its insert
// waits for a transaction that wrote the next position into the log
// behind orisun's back and stays open) holds the lease row FOR SHARE,
// which the node's renewals update. The move is bounded by a third of
// the lease TTL (900 ms here), so the node keeps its lease in the same
// term while the moves fail, and the status's move_error says the move
// did not end within its bound; once the transaction ends, the staged
// event moves. With the earlier bound, max(TTL/2, 1 s), a move outlasted
// the TTL and the node dropped its own lease.
func TestEnqueueMoveBoundKeepsLease(t *testing.T) {
	url := pgtest.URL(t)
	n := setup(t, "", func(c *orisun.Config) {
		c.Backend, c.PGURL, c.LeaseTTL = "postgres", url, 900*time.Millisecond
	})
	ctx := context.Background()
	var term uint64
	testutil.Eventually(t, "the node leading in a term", 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := n.Status(ctx)
		if err != nil || !st.Settled || st.Boundaries[0].State != status.StateLeading {
			return false
		}
		term = st.Boundaries[0].LeaseTerm
		return term > 0
	})
	blocker := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := blocker.Exec(ctx, `INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
		VALUES ('default', 1, gen_random_uuid(), 'blocker', now(), '{}', '1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Connect(t, url).Exec(ctx, `SELECT orisun_enqueue('default', '[{"type":"app.staged","data":1}]')`); err != nil {
		t.Fatal(err)
	}
	var moveErr string
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		st := testutil.Get(t, n.Status)
		b := st.Boundaries[0]
		if b.LeaseTerm != term || b.State != status.StateLeading {
			t.Fatalf("while the moves fail: term %d (was %d), state %s (%s): the node lost its lease", b.LeaseTerm, term, b.State, b.Reason)
		}
		if b.MoveError != "" {
			moveErr = b.MoveError
		}
	}
	if !strings.Contains(moveErr, "did not end within") {
		t.Fatalf("move_error %q, want the move's bound named", moveErr)
	}
	t.Logf("move_error: %s", moveErr)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, n, 10*time.Second)
	if b := st.Boundaries[0]; b.Head != 1 || b.LeaseTerm != term || b.MoveError != "" {
		t.Fatalf("after the blocker ended: head %d, term %d (was %d), move_error %q", b.Head, b.LeaseTerm, term, b.MoveError)
	}
}

// TestEnqueueRowLockShownInStatus_I7: a staged row that another session
// holds a row lock on (FOR KEY SHARE) holds back the moves of the
// boundary, and the status's move_error names that session's pid (I7);
// once its transaction ends the staged events move in the order of their
// calls. The row is locked before the mover can reach it by an
// application transaction that holds the head row (orisun_append) meanwhile.
func TestEnqueueRowLockShownInStatus_I7(t *testing.T) {
	n, url := pgNode(t, 50*time.Millisecond)
	ctx := context.Background()
	waitSettled(t, n, 10*time.Second)
	holder := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := holder.Exec(ctx, `SELECT orisun_append('default', '[{"type":"app.held","data":0}]')`); err != nil {
		t.Fatal(err)
	}
	app := pgtest.Connect(t, url)
	for i := 1; i <= 2; i++ {
		if _, err := app.Exec(ctx, fmt.Sprintf(`SELECT orisun_enqueue('default', '[{"type":"app.staged","data":%d},{"type":"app.staged","data":%d}]')`, 2*i-1, 2*i)); err != nil {
			t.Fatal(err)
		}
	}
	ltx, pid := pgtest.Lock(t, url, `SELECT 1 FROM orisun_staged WHERE data::text = '2' FOR KEY SHARE`)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var moveErr string
	testutil.Eventually(t, "move_error naming the locking pid", 10*time.Second, 20*time.Millisecond, func() bool {
		st := testutil.Get(t, n.Status)
		moveErr = st.Boundaries[0].MoveError
		return strings.Contains(moveErr, fmt.Sprintf("pid %d", pid))
	})
	t.Logf("move_error: %s", moveErr)
	if st, err := n.Status(ctx); err != nil || st.Boundaries[0].Head != 1 || st.Boundaries[0].Staged != 4 {
		t.Fatalf("while held back: %+v, %v; want head 1 (the held append) and 4 staged", st, err)
	}
	if err := ltx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitSettled(t, n, 10*time.Second)
	if b := st.Boundaries[0]; b.Head != 5 || b.MoveError != "" {
		t.Fatalf("after the lock ended: head %d, move_error %q; want 5 and none", b.Head, b.MoveError)
	}
	_, evs, err := n.Read(ctx, "default", 1, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if string(e.Data) != fmt.Sprint(i+1) {
			t.Fatalf("position %d holds data %s, want %d: the calls moved out of order", e.Position, e.Data, i+1)
		}
	}
}

// TestEnqueueNeverSettledBeforeMoved_I7: after each committed enqueue the
// status is polled until it says settled; a settled report must count the
// event under the head. The status reads the staging and the heads in two
// statements: with the heads read first, a move committing between the two
// showed the event nowhere (head before it, staging after it), and the
// report said settled with a committed event not in the head.
func TestEnqueueNeverSettledBeforeMoved_I7(t *testing.T) {
	n, url := pgNode(t, 50*time.Millisecond)
	ctx := context.Background()
	waitSettled(t, n, 10*time.Second)
	app := pgtest.Connect(t, url)
	reports := 0
	for i := 1; i <= 150; i++ {
		if _, err := app.Exec(ctx, `SELECT orisun_enqueue('default', '[{"type":"app.staged","data":1}]')`); err != nil {
			t.Fatal(err)
		}
		for {
			st := testutil.Get(t, n.Status)
			reports++
			if !st.Settled {
				continue
			}
			if h := st.Boundaries[0].Head; h != uint64(i) {
				t.Fatalf("enqueue %d committed; a settled status says head %d, staged %d (after %d reports)", i, h, st.Boundaries[0].Staged, reports)
			}
			break
		}
	}
	t.Logf("%d status reports", reports)
}
