package orisun_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/stream"
)

// streamInfo reads a boundary's stream through a node's NATS.
func streamInfo(t *testing.T, n *orisun.Node, boundary string) (*jetstream.StreamInfo, error) {
	t.Helper()
	nc, err := nats.Connect(n.NATSURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream.Name(boundary))
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// TestStreamReplicasUpdated: a stream created with one replica is changed to
// three when the nodes of the embedded cluster restart with
// ORISUN_NATS_STREAM_REPLICAS=3, instead of keeping the replica count it was
// created with; the status reports the measured count, and publishing goes
// on at the right positions (I2).
func TestStreamReplicasUpdated(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ports, routes := clusterPorts(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	logs := &syncBuffer{}
	start := func(replicas int) []*orisun.Node {
		var nodes []*orisun.Node
		for i, p := range ports {
			nodes = append(nodes, setup(t, dirs[i], func(c *orisun.Config) {
				c.Backend, c.PGURL = "postgres", url
				c.NodeID = fmt.Sprintf("node-%d", i+1)
				c.NATSClusterName = "orisun_test"
				c.NATSClusterPort = p
				c.NATSClusterRoutes = routes
				c.StreamReplicas = replicas
				c.EventStreamMaxBytes = 8 << 20
			}, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))))
		}
		return nodes
	}
	// changedBack counts the publishers' lines that changed the stream
	// from one replica to three.
	changedBack := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "stream replicas changed") && strings.Contains(l, "from=1 to=3") {
				n++
			}
		}
		return n
	}
	nodes := start(1)
	lead := leaderOf(t, nodes, "default", 60*time.Second)
	if _, err := nodes[(lead+1)%3].Append(ctx, "default", events(20, "r1", 64), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, nodes[lead], 60*time.Second)
	info, err := streamInfo(t, nodes[lead], "default")
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 1 {
		t.Fatalf("stream created with %d replicas, want 1", info.Config.Replicas)
	}
	for _, n := range nodes {
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}

	nodes = start(3)
	testutil.Until(t, "the stream at 3 replicas after the restart with ORISUN_NATS_STREAM_REPLICAS=3", 90*time.Second, 200*time.Millisecond, func() error {
		info, err = streamInfo(t, nodes[0], "default")
		if err == nil && info.Config.Replicas == 3 && info.Cluster != nil && len(info.Cluster.Replicas) == 2 {
			return nil
		}
		var warnings []string
		for _, n := range nodes {
			if st, err := n.Status(ctx); err == nil && len(st.Boundaries) == 1 {
				warnings = append(warnings, st.Boundaries[0].Warning)
			}
		}
		if info == nil {
			return fmt.Errorf("stream info: %v; warnings %q", err, warnings)
		}
		return fmt.Errorf("%+v (cluster %+v, err %v); warnings %q", info.Config.Replicas, info.Cluster, err, warnings)
	})
	if _, err := nodes[2].Append(ctx, "default", events(10, "r3", 64), nil); err != nil {
		t.Fatal(err)
	}
	lead = leaderOf(t, nodes, "default", 60*time.Second)
	// Someone with the rights takes the stream back to one replica: the
	// drift check (every ORISUN_POLL_INTERVAL) finds it, the status names
	// it while it lasts, and the leading publisher changes it back.
	//
	// Whether a status read falls between the change and the put-back is
	// timing (the publisher may check its stream right after the change,
	// within milliseconds), so what is asserted is what must hold: every
	// status read that measured fewer than three replicas names them in
	// its warning (I7), and it was a publisher that changed them back.
	before := changedBack()
	tamper(t, attacker(t, nodes[lead]), "default", func(c *jetstream.StreamConfig) { c.Replicas = 1 })
	measured := 0
	testutil.Eventually(t, "the stream back at 3 replicas", 60*time.Second, 50*time.Millisecond, func() bool {
		if st, err := nodes[lead].Status(ctx); err == nil {
			if b := st.Boundaries[0]; b.StreamReplicas != 3 {
				measured++
				if want := fmt.Sprintf("keeps %d replica(s), not the 3", b.StreamReplicas); !strings.Contains(b.Warning, want) {
					t.Fatalf("a status read measured %d replica(s) and its warning does not say %q: %q", b.StreamReplicas, want, b.Warning)
				}
			}
		}
		info, err = streamInfo(t, nodes[0], "default")
		return err == nil && info.Config.Replicas == 3 && info.Cluster != nil && len(info.Cluster.Replicas) == 2
	})
	t.Logf("status reads that measured the lost replicas, each naming them: %d", measured)
	testutil.Eventually(t, "a publisher's log line changing the replicas from 1 back to 3", 10*time.Second, 20*time.Millisecond,
		func() bool { return changedBack() > before })
	st := waitSettled(t, nodes[lead], 60*time.Second)
	if b := st.Boundaries[0]; b.StreamReplicas != 3 || b.Warning != "" || b.Head != 30 {
		t.Fatalf("status after the update: replicas %d, warning %q, head %d; want 3, none, 30", b.StreamReplicas, b.Warning, b.Head)
	}
	if _, last := checkStream(t, nodes[1], "default"); last != 30 {
		t.Fatalf("stream ends at %d, want 30", last)
	}
}

// syncBuffer is a log destination tests can read while the node writes.
type syncBuffer = testutil.LogBuffer

// TestStreamReplicasRefusedIsReported: when JetStream refuses the configured
// replica count for an existing stream (a single server takes one replica
// only), the node logs JetStream's reason once, the status carries it as
// the boundary's warning with the measured replica count, and publishing
// goes on (I4, I7).
func TestStreamReplicasRefusedIsReported(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ns := usersNATS(t)
	cfg := func(replicas int) func(*orisun.Config) {
		return func(c *orisun.Config) {
			ns.join(c, url)
			c.StreamReplicas = replicas
		}
	}
	first := setup(t, "", cfg(1))
	appendSettled(t, ctx, first, events(5, "before", 32), 30*time.Second)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	second := setup(t, "", cfg(3), orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	var warning string
	testutil.Eventually(t, "a warning in the status about the refused replica count", 30*time.Second, 50*time.Millisecond, func() bool {
		st, err := second.Status(ctx)
		if err == nil && len(st.Boundaries) == 1 {
			warning = st.Boundaries[0].Warning
			if warning != "" && st.Boundaries[0].StreamReplicas != 1 {
				t.Fatalf("status reports %d stream replicas, the stream has 1", st.Boundaries[0].StreamReplicas)
			}
		}
		// Every node measures the count; the publisher adds JetStream's
		// reason once it tried.
		return strings.Contains(warning, "non-clustered")
	})
	if !strings.Contains(warning, "keeps 1 replica(s), not the 3") || !strings.Contains(warning, "non-clustered") {
		t.Fatalf("warning %q does not say what was refused and JetStream's reason", warning)
	}
	appendSettled(t, ctx, second, events(5, "after", 32), 30*time.Second)
	if first, last := checkStream(t, second, "default"); first != 1 || last != 10 {
		t.Fatalf("stream %d..%d, want 1..10", first, last)
	}
	if n := strings.Count(logs.String(), "stream configuration not applied"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestR1StreamsInAClusterWarn: an embedded cluster with one replica per
// stream (the default) logs at start-up that losing the node that hosts a
// stream blocks that boundary for every node, and recommends 3; with 3
// replicas it says nothing of the kind.
func TestR1StreamsInAClusterWarn(t *testing.T) {
	url := pgtest.URL(t)
	const warning = "set ORISUN_NATS_STREAM_REPLICAS=3"
	for _, replicas := range []int{1, 3} {
		ports, routes := clusterPorts(t, 1)
		logs := &syncBuffer{}
		n := setup(t, "", func(c *orisun.Config) {
			c.Backend, c.PGURL = "postgres", url
			c.NodeID = fmt.Sprintf("r%d", replicas)
			c.NATSClusterName = "orisun_test"
			c.NATSClusterPort = ports[0]
			c.NATSClusterRoutes = routes
			c.StreamReplicas = replicas
		}, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		got := strings.Count(logs.String(), warning)
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
		switch {
		case replicas == 1 && (got != 1 || !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "10118")):
			t.Fatalf("replicas 1 in a cluster: warning logged %d times, want once at WARN naming error 10118:\n%s", got, logs.String())
		case replicas == 3 && got != 0:
			t.Fatalf("replicas 3: the one-replica warning was logged:\n%s", logs.String())
		}
	}
}
