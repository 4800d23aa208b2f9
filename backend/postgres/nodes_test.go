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
		n, _, err := s.Heartbeat(ctx, holder, "node-"+holder, ttl)
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
	if _, _, err := s.Heartbeat(ctx, "", "node", ttl); err == nil {
		t.Fatal("a heartbeat without a holder was accepted")
	}
}

// TestHeartbeatFindsTwins: two live processes with one node id (a copied
// data directory) each find the other's holder; a process of another node
// id is no twin, and neither is the row of the node's previous process,
// which stopped beating before this one began (a restart after a crash).
func TestHeartbeatFindsTwins(t *testing.T) {
	s := setup(t, Config{URL: pgtest.URL(t)})
	ctx := context.Background()
	ttl := time.Minute
	beat := func(holder, nodeID string) string {
		t.Helper()
		_, twin, err := s.Heartbeat(ctx, holder, nodeID, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return twin
	}
	// The previous process of node n1 beat, then died.
	beat("n1#dead", "n1")
	if twin := beat("n1#new", "n1"); twin != "" {
		t.Fatalf("a restarted node takes its dead predecessor %q for a twin", twin)
	}
	if twin := beat("n1#new", "n1"); twin != "" {
		t.Fatalf("a restarted node takes its dead predecessor %q for a twin on its second beat", twin)
	}
	if twin := beat("n2#x", "n2"); twin != "" {
		t.Fatalf("another node id found twin %q", twin)
	}
	// A copy of n1's data directory starts: both beat.
	beat("n1#copy", "n1")
	if twin := beat("n1#new", "n1"); twin != "n1#copy" {
		t.Fatalf("n1#new found twin %q, want n1#copy", twin)
	}
	if twin := beat("n1#copy", "n1"); twin != "n1#new" {
		t.Fatalf("n1#copy found twin %q, want n1#new", twin)
	}
	// The copy stops beating: once its heartbeat is older than the TTL it
	// is no twin any more.
	conn := connect(t, s)
	if _, err := conn.Exec(ctx, `UPDATE orisun_nodes SET heartbeat_at = clock_timestamp() - interval '2 minutes' WHERE holder = 'n1#copy'`); err != nil {
		t.Fatal(err)
	}
	if twin := beat("n1#new", "n1"); twin != "" {
		t.Fatalf("a twin silent for two TTLs is still reported: %q", twin)
	}
}
