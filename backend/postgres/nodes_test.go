package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/pgtest"
)

// TestHeartbeats: the table of live nodes behind placement. Each heartbeat
// counts the nodes whose heartbeat is younger than the TTL, itself
// included; a row aged past the TTL (a node whose store went away) is not
// counted, and pruned once silent for a hundred TTLs; RemoveNode (a clean
// stop) takes a node out at once.
func TestHeartbeats(t *testing.T) {
	s := setup(t, Config{URL: pgtest.URL(t)})
	ctx := context.Background()
	ttl := time.Minute
	beat := func(holder string) int {
		t.Helper()
		n, err := s.Heartbeat(ctx, holder, "node", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := beat("a#1"); n != 1 {
		t.Fatalf("first node counts %d live nodes, want 1", n)
	}
	if n := beat("b#1"); n != 2 {
		t.Fatalf("second node counts %d, want 2", n)
	}
	if n := beat("a#1"); n != 2 {
		t.Fatalf("a second heartbeat of a counts %d, want 2 (one row per holder)", n)
	}
	conn := connect(t, s)
	// a's heartbeat stops: its row ages past the TTL.
	if _, err := conn.Exec(ctx, `UPDATE orisun_nodes SET heartbeat_at = clock_timestamp() - interval '2 minutes' WHERE holder = 'a#1'`); err != nil {
		t.Fatal(err)
	}
	if n := beat("b#1"); n != 1 {
		t.Fatalf("with a's heartbeat two TTLs old b counts %d, want 1", n)
	}
	rows := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM orisun_nodes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != 2 {
		t.Fatalf("%d rows, want 2: a row younger than a hundred TTLs is kept", n)
	}
	if _, err := conn.Exec(ctx, `UPDATE orisun_nodes SET heartbeat_at = clock_timestamp() - interval '101 minutes' WHERE holder = 'a#1'`); err != nil {
		t.Fatal(err)
	}
	beat("b#1")
	if n := rows(); n != 1 {
		t.Fatalf("%d rows, want 1: a row silent for a hundred TTLs is pruned", n)
	}
	beat("a#1") // a comes back
	if err := s.RemoveNode(ctx, "b#1"); err != nil {
		t.Fatal(err)
	}
	if n := beat("a#1"); n != 1 {
		t.Fatalf("after b removed itself a counts %d, want 1", n)
	}
	if _, err := s.Heartbeat(ctx, "", "node", ttl); err == nil {
		t.Fatal("a heartbeat without a holder was accepted")
	}
}
