package orisun_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/publisher"
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
			if b.State == publisher.StateLeading {
				counts[i]++
			}
		}
	}
	return counts
}

func waitCounts(t *testing.T, nodes []*orisun.Node, want []int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got []int
	for {
		got = leadCounts(nodes)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("boundaries led per node: %v, want %v within %s", got, want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
		c.Backend, c.PGURL = "postgres", url
		c.NATSURL, c.NATSUser, c.NATSPassword = ns.ClientURL(), "orisun", "s3cret"
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
