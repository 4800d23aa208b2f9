package orisun_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// clusterPorts picks n free ports for cluster listeners and returns them
// with the route list every node is given (its own route included, as in
// docker-compose.yml). A JetStream cluster needs routes configured on every
// server, so the ports are chosen before the nodes start.
func clusterPorts(t *testing.T, n int) ([]int, []string) {
	t.Helper()
	ports := testutil.FreePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	return ports, routes
}

// clusterNode starts a node of an embedded NATS cluster on PostgreSQL.
func clusterNode(t *testing.T, pgURL, id string, port int, routes []string, mutate func(*orisun.Config)) *orisun.Node {
	t.Helper()
	return setup(t, "", func(c *orisun.Config) {
		c.Backend, c.PGURL = "postgres", pgURL
		c.NodeID = id
		c.NATSClusterName = "orisun_test"
		c.NATSClusterPort = port
		c.NATSClusterRoutes = routes
		c.StreamReplicas = 3
		c.EventStreamMaxBytes = 8 << 20
		if mutate != nil {
			mutate(c)
		}
	})
}

// leaderOf returns the index of the node whose publisher leads boundary.
func leaderOf(t *testing.T, nodes []*orisun.Node, boundary string, timeout time.Duration) int {
	t.Helper()
	leader := -1
	testutil.Eventually(t, fmt.Sprintf("a node to lead %q", boundary), timeout, 50*time.Millisecond, func() bool {
		for i, n := range nodes {
			st, err := n.Status(context.Background())
			if err != nil {
				continue
			}
			for _, b := range st.Boundaries {
				if b.Name == boundary && b.State == status.StateLeading {
					leader = i
					return true
				}
			}
		}
		return false
	})
	return leader
}

// TestEmbeddedCluster_I2_I5: three nodes on one PostgreSQL join their
// embedded NATS servers into one cluster with clustered JetStream. The
// boundary's stream has three replicas; every position is published once at
// its own sequence (I2), whichever node took the append; a subscription on
// a node that does not lead goes live on the shared stream and receives
// every later event exactly once (I5); and a plain NATS client of a node
// that does not lead reads the stream there.
func TestEmbeddedCluster_I2_I5(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ports, routes := clusterPorts(t, 3)
	var nodes []*orisun.Node
	for i, p := range ports {
		nodes = append(nodes, clusterNode(t, url, fmt.Sprintf("node-%d", i+1), p, routes, nil))
	}
	if nodes[0].NATSClusterURL() == "" {
		t.Fatal("a clustered node reports no cluster URL")
	}

	lead := leaderOf(t, nodes, "default", 60*time.Second)
	other := nodes[(lead+1)%3]
	// Appends through a node that does not lead.
	for i := 0; i < 5; i++ {
		if _, err := other.Append(ctx, "default", events(10, "first", 64), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, nodes[lead], 60*time.Second)

	s, err := jsOf(t, other).Stream(ctx, stream.Name("default"))
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream replicas: config %d, cluster %+v; want 3 (a leader and two replicas)", info.Config.Replicas, info.Cluster)
	}
	if first, last := checkStream(t, other, "default"); first != 1 || last != 50 {
		t.Fatalf("stream read on a node that does not lead holds %d..%d, want 1..50 (I2)", first, last)
	}

	// A subscription on the node that does not lead goes live.
	var wentLive atomic.Bool
	rec := newRecorder(50)
	stop := subscribe(t, other, "default", 50, rec, orisun.SubscribeOptions{
		OnCaughtUp: func(uint64) { wentLive.Store(true) },
	})
	testutil.Eventually(t, "the subscription on a node that does not lead to go live on the shared stream",
		30*time.Second, 20*time.Millisecond, wentLive.Load)
	for i := 0; i < 3; i++ {
		if _, err := nodes[(lead+2)%3].Append(ctx, "default", events(10, "second", 64), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDelivered(t, rec, 80, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, other, "default", 50, rec)
	if first, last := checkStream(t, nodes[(lead+2)%3], "default"); first != 1 || last != 80 {
		t.Fatalf("stream holds %d..%d, want 1..80 (I2)", first, last)
	}
	st, err := other.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NATS.Kind != "embedded-cluster" {
		t.Fatalf("status NATS kind %q, want embedded-cluster", st.NATS.Kind)
	}
	t.Logf("leader node-%d; live subscription on %s", lead+1, st.NodeID)
}
