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
		n, _, _, err := s.Heartbeat(ctx, holder, "node-"+holder, nil, ttl)
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
	if _, _, _, err := s.Heartbeat(ctx, "", "node", nil, ttl); err == nil {
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
		_, twin, _, err := s.Heartbeat(ctx, holder, nodeID, nil, ttl)
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

// TestHeartbeatFindsLiveGoneHolders: a node names the holders its data
// directory's lock file says have ended (gone); the heartbeat names those
// of them that beat after this process's first heartbeat, which followed
// its lock. The row of the directory's previous process, which died before
// the lock was taken, is never named; the holder of a live original whose
// directory was cloned with its lock file is, from its first heartbeat
// after the copy's, whatever its node id.
func TestHeartbeatFindsLiveGoneHolders(t *testing.T) {
	s := setup(t, Config{URL: pgtest.URL(t)})
	ctx := context.Background()
	ttl := time.Minute
	beat := func(holder string, gone ...string) []string {
		t.Helper()
		_, _, alive, err := s.Heartbeat(ctx, holder, "n1", gone, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return alive
	}
	// The previous process beat, then died; the restarted one names it.
	beat("n1#dead")
	for i := range 2 {
		if alive := beat("n1#new", "n1#dead", "n1#never-beat"); len(alive) != 0 {
			t.Fatalf("heartbeat %d of a restarted node names %v alive; its predecessor is dead", i+1, alive)
		}
	}
	// A live original, and a copy of its directory that names it as gone:
	// the original's heartbeat before the copy's first is no proof of life
	// (a process that died just before the copy's lock beat then too); its
	// next one is.
	beat("n1#orig")
	if alive := beat("n1#copy", "n1#orig", "n1#dead"); len(alive) != 0 {
		t.Fatalf("the copy's first heartbeat names %v alive, before the original beat again", alive)
	}
	beat("n1#orig")
	if alive := beat("n1#copy", "n1#orig", "n1#dead"); len(alive) != 1 || alive[0] != "n1#orig" {
		t.Fatalf("the copy's heartbeat after the original's names %v alive, want [n1#orig]", alive)
	}
	// Another node id is named too: the rule is the holder's, not the id's.
	if _, _, _, err := s.Heartbeat(ctx, "n2#other", "n2", nil, ttl); err != nil {
		t.Fatal(err)
	}
	if alive := beat("n1#copy", "n2#other"); len(alive) != 1 || alive[0] != "n2#other" {
		t.Fatalf("a holder of another node id that beat after the copy's first heartbeat: named %v, want [n2#other]", alive)
	}
}
