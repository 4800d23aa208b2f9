package orisun_test

import (
	"context"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/status"
)

// leadCounts returns how many boundaries each node's publisher leads.
func leadCounts(nodes []*orisun.Node) []int {
	counts := make([]int, len(nodes))
	for i, n := range nodes {
		st, err := n.Status(context.Background())
		if err != nil {
			continue
		}
		for _, b := range st.Boundaries {
			if b.State == status.StateLeading {
				counts[i]++
			}
		}
	}
	return counts
}

func waitCounts(t *testing.T, nodes []*orisun.Node, want []int, timeout time.Duration) {
	t.Helper()
	testutil.Until(t, fmt.Sprintf("boundaries led per node %v", want), timeout, 100*time.Millisecond, func() error {
		if got := leadCounts(nodes); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("boundaries led per node: %v", got)
		}
		return nil
	})
}

// TestPlacementSpreadsBoundaries: on one PostgreSQL and a shared NATS, the
// first node up leads all 12 boundaries; when two more join, the
// publishers spread to 4 per node; when one leaves, its boundaries move and
// the two others lead 6 each. Every boundary stays published (I4): events
// appended after the moves reach the streams.
func TestPlacementSpreadsBoundaries(t *testing.T) {
	url := pgtest.URL(t)
	ns := usersNATS(t)
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("b%02d", i))
	}
	cfg := func(c *orisun.Config) {
		ns.join(c, url)
		c.Boundaries = names
		c.LeaseTTL = time.Second
	}
	first := setup(t, "", cfg)
	waitCounts(t, []*orisun.Node{first}, []int{12}, 30*time.Second)
	nodes := []*orisun.Node{first, setup(t, "", cfg), setup(t, "", cfg)}
	waitCounts(t, nodes, []int{4, 4, 4}, 60*time.Second)

	if err := nodes[2].Stop(); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, nodes[:2], []int{6, 6}, 60*time.Second)
	ctx := context.Background()
	for _, b := range names {
		if _, err := nodes[0].Append(ctx, b, events(3, "after", 32), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, nodes[1], 30*time.Second)
}

// TestPlacementCountsHeartbeats: nodes are counted by their heartbeats in
// the store, not by who answers over NATS. Node C loses its database (its
// role may no longer log in and its connections are ended) while its NATS
// connection and API stay up: its heartbeat stops, A and B stop counting it
// within a lease TTL, take its share (6 each) and keep it, without leases
// changing hands among themselves. Events appended afterwards are published
// for every boundary (I4). A node that stops cleanly deletes its row at
// once.
func TestPlacementCountsHeartbeats(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, url)
	// A role of C's own, so that its store alone can be taken away.
	role := fmt.Sprintf("orisun_test_node_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN SUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	roleURL := u.String()

	ns := usersNATS(t)
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("b%02d", i))
	}
	cfg := func(pg string) func(*orisun.Config) {
		return func(c *orisun.Config) {
			ns.join(c, pg)
			c.Boundaries = names
			c.LeaseTTL = 2 * time.Second
		}
	}
	nodes := []*orisun.Node{setup(t, "", cfg(url)), setup(t, "", cfg(url)), setup(t, "", cfg(roleURL))}
	waitCounts(t, nodes, []int{4, 4, 4}, 90*time.Second)
	waitLiveNodes(t, nodes, 3, 30*time.Second)

	// C's store goes away; its NATS connection stays.
	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role); err != nil {
		t.Fatal(err)
	}
	waitLiveNodes(t, nodes[:2], 2, 30*time.Second)
	waitCounts(t, nodes, []int{6, 6, 0}, 90*time.Second)

	// Settled: for two lease TTLs (six placement rounds) no lease changes
	// hands. Counting C (as a NATS PING would) made A and B give leases up
	// to each other every round.
	terms := leaseTerms(t, nodes[0])
	time.Sleep(4 * time.Second)
	if after := leaseTerms(t, nodes[0]); fmt.Sprint(after) != fmt.Sprint(terms) {
		t.Fatalf("leases changed hands after placement settled: terms %v, then %v", terms, after)
	}
	if got := leadCounts(nodes); fmt.Sprint(got) != "[6 6 0]" {
		t.Fatalf("boundaries led per node after settling: %v, want [6 6 0]", got)
	}
	for _, b := range names {
		if _, err := nodes[0].Append(ctx, b, events(3, "after", 32), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, nodes[1], 60*time.Second)

	// A clean stop deletes the node's row: B is no longer counted at once.
	stB, err := nodes[1].Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].Stop(); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM orisun_nodes WHERE holder = $1", stB.LeaseHolder).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("after a clean stop node B has %d rows in orisun_nodes (err %v), want 0", rows, err)
	}
	waitLiveNodes(t, nodes[:1], 1, 30*time.Second)
	waitCounts(t, nodes[:1], []int{12}, 60*time.Second)
}

// waitLiveNodes waits until every node's placement counts want live nodes.
func waitLiveNodes(t *testing.T, nodes []*orisun.Node, want int, timeout time.Duration) {
	t.Helper()
	testutil.Until(t, fmt.Sprintf("every node to count %d live nodes", want), timeout, 100*time.Millisecond, func() error {
		var got []int
		for _, n := range nodes {
			st, err := n.Status(context.Background())
			if err != nil || st.Placement == nil {
				got = append(got, -1)
				continue
			}
			got = append(got, st.Placement.LiveNodes)
		}
		all := true
		for _, g := range got {
			all = all && g == want
		}
		if !all {
			return fmt.Errorf("live nodes counted per node: %v", got)
		}
		return nil
	})
}

// leaseTerms returns each boundary's lease holder and term, as the store
// has them.
func leaseTerms(t *testing.T, n *orisun.Node) map[string]string {
	t.Helper()
	st := testutil.Get(t, n.Status)
	out := map[string]string{}
	for _, b := range st.Boundaries {
		out[b.Name] = fmt.Sprintf("%s/%d", b.LeaseHolder, b.LeaseTerm)
	}
	return out
}

// TestDuplicateNodeIDReported: a data directory copied with its node-id
// file gives a second node the first one's id. Both run on one PostgreSQL
// and a shared NATS; each finds the other's live heartbeat under its id,
// logs an ERROR once that names the id, the node-id file and what to do,
// and shows it as the node's status warning. A node with another id sees
// no warning, and neither does a node restarted on its own data directory
// (its previous process's row is not a twin).
func TestDuplicateNodeIDReported(t *testing.T) {
	url := pgtest.URL(t)
	ns := usersNATS(t)
	cfg := func(c *orisun.Config) {
		ns.join(c, url)
		c.LeaseTTL = 300 * time.Millisecond
	}
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	// A restart on the own data directory first: no warning.
	first := setup(t, dirA, cfg)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	logsA, logsB := &syncBuffer{}, &syncBuffer{}
	a := setup(t, dirA, cfg, orisun.WithLogger(slog.New(slog.NewTextHandler(logsA, nil))))
	other := setup(t, "", cfg)
	time.Sleep(5 * a.Config().LeaseTTL) // a dozen heartbeats
	for _, n := range []*orisun.Node{a, other} {
		if st, err := n.Status(ctx); err != nil || st.Warning != "" {
			t.Fatalf("node %s before any copy: warning %q (err %v), want none", n.Config().NodeID, st.Warning, err)
		}
	}
	// The copy.
	id, err := os.ReadFile(filepath.Join(dirA, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirB, "node-id"), id, 0o644); err != nil {
		t.Fatal(err)
	}
	b := setup(t, dirB, cfg, orisun.WithLogger(slog.New(slog.NewTextHandler(logsB, nil))))
	if b.Config().NodeID != a.Config().NodeID {
		t.Fatalf("the copy has node id %q, want %q", b.Config().NodeID, a.Config().NodeID)
	}
	for _, c := range []struct {
		n    *orisun.Node
		dir  string
		logs *syncBuffer
	}{{a, dirA, logsA}, {b, dirB, logsB}} {
		var warning string
		testutil.Eventually(t, "a status warning about the duplicate node id of the node in "+c.dir, 30*time.Second, 50*time.Millisecond,
			func() bool {
				if st, err := c.n.Status(ctx); err == nil {
					warning = st.Warning
				}
				return warning != ""
			})
		for _, want := range []string{c.n.Config().NodeID, filepath.Join(c.dir, "node-id"), "ORISUN_NODE_ID", "delete"} {
			if !strings.Contains(warning, want) {
				t.Fatalf("warning %q does not name %q", warning, want)
			}
		}
		time.Sleep(3 * c.n.Config().LeaseTTL) // more heartbeats: still one ERROR
		logged := c.logs.String()
		if got := strings.Count(logged, "is also used by another live process"); got != 1 || !strings.Contains(logged, "level=ERROR") {
			t.Fatalf("node in %s logged the duplicate %d times, want once at ERROR:\n%s", c.dir, got, logged)
		}
	}
	if st, err := other.Status(ctx); err != nil || st.Warning != "" {
		t.Fatalf("a node with another id: warning %q (err %v), want none", st.Warning, err)
	}
	// The copy goes away: the warning clears.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the warning to clear once the copy stopped", 30*time.Second, 50*time.Millisecond, func() bool {
		st, err := a.Status(ctx)
		return err == nil && st.Warning == ""
	})
}
