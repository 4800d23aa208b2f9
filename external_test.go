package orisun_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// usersNATS starts a NATS server with JetStream and users in the test
// process: the NATS deployment a user already runs. orisun logs in as
// "orisun" (join); clients without credentials (the test's stream checks)
// are "reader"; extra users are added to those.
func usersNATS(t *testing.T, extra ...*server.User) *usersServer {
	t.Helper()
	return usersNATSWith(t, nil, extra...)
}

// usersNATSWith is usersNATS with its options changed by mutate first.
func usersNATSWith(t *testing.T, mutate func(*server.Options), extra ...*server.User) *usersServer {
	t.Helper()
	opts := &server.Options{
		ServerName: "users-nats",
		Users: append([]*server.User{
			{Username: "orisun", Password: "s3cret"},
			{Username: "reader", Password: "r"},
		}, extra...),
		NoAuthUser: "reader",
	}
	if mutate != nil {
		mutate(opts)
	}
	return &usersServer{Server: runNATS(t, opts), opts: opts}
}

// usersServer is the NATS server of usersNATS and the options it runs
// with (a test reloads them changed).
type usersServer struct {
	*server.Server
	opts *server.Options
}

// join configures a node for PostgreSQL at pgURL and this NATS server,
// logged in as "orisun".
func (ns *usersServer) join(c *orisun.Config, pgURL string) {
	c.Backend, c.PGURL = "postgres", pgURL
	c.NATSURL, c.NATSUser, c.NATSPassword = ns.ClientURL(), "orisun", "s3cret"
}

// TestExternalNATS_I2_I5: with ORISUN_NATS_URL two nodes on one PostgreSQL
// start no NATS server of their own and use the given deployment, logging in
// with the configured user: the boundary's stream is created there, every
// position is published once at its sequence (I2), and a subscription on the
// node that does not lead goes live on that stream and receives every later
// event exactly once (I5).
func TestExternalNATS_I2_I5(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ns := usersNATS(t)
	external := func(c *orisun.Config) { ns.join(c, url) }
	nodes := []*orisun.Node{setup(t, "", external), setup(t, "", external)}
	for _, n := range nodes {
		if n.NATSURL() != ns.ClientURL() || n.NATSClusterURL() != "" {
			t.Fatalf("node NATS URL %q (cluster %q), want the external %q", n.NATSURL(), n.NATSClusterURL(), ns.ClientURL())
		}
	}
	lead := leaderOf(t, nodes, "default", 30*time.Second)
	other := nodes[1-lead]
	if _, err := other.Append(ctx, "default", events(20, "first", 64), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, nodes[lead], 30*time.Second)
	if first, last := checkStream(t, other, "default"); first != 1 || last != 20 {
		t.Fatalf("stream on the external NATS holds %d..%d, want 1..20 (I2)", first, last)
	}
	if jsz, err := ns.Jsz(&server.JSzOptions{Streams: true}); err != nil || jsz.Streams != 1 {
		t.Fatalf("the external server holds %v streams (err %v), want orisun's one", jsz, err)
	}

	// A wrong password: the node does not start, and says where it failed.
	bad, err := orisun.New(orisun.Config{DataDir: t.TempDir(), Backend: "postgres", PGURL: url,
		NATSURL: ns.ClientURL(), NATSUser: "orisun", NATSPassword: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(ctx); err == nil || !strings.Contains(err.Error(), "external NATS") {
		t.Fatalf("start with a wrong password: %v, want an error about the external NATS", err)
	}

	var wentLive atomic.Bool
	rec := newRecorder(20)
	stop := subscribe(t, other, "default", 20, rec, orisun.SubscribeOptions{OnCaughtUp: func(uint64) { wentLive.Store(true) }})
	testutil.Eventually(t, "the subscription on the node that does not lead to go live on the external stream",
		30*time.Second, 20*time.Millisecond, wentLive.Load)
	if _, err := nodes[lead].Append(ctx, "default", events(15, "second", 64), nil); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, rec, 35, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, other, "default", 20, rec)
	st, err := other.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NATS.Kind != "external" || !st.NATS.OK {
		t.Fatalf("status NATS %+v, want external and OK", st.NATS)
	}
}

// TestPausedRemoteLeaderStoreServes_I5: with a shared NATS a subscription on
// a node that does not lead takes the stream as fed while another node
// holds the lease. When that leader is paused (JetStream refuses its
// publishes: the server's memory is full), the stream
// stops short of the store; the subscription must notice (nothing arrives
// while the store holds its next position) and read the store, not wait
// for as long as the pause lasts. Every position still arrives exactly
// once, in order.
func TestPausedRemoteLeaderStoreServes_I5(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ns := usersNATSWith(t, func(o *server.Options) { o.JetStreamMaxMemory = 1 << 20 })
	external := func(c *orisun.Config) {
		ns.join(c, url)
		c.EventStreamMaxBytes = 64 << 10
		withHTTP(c)
	}
	nodes := []*orisun.Node{setup(t, "", external), setup(t, "", external)}
	lead := leaderOf(t, nodes, "default", 30*time.Second)
	other := nodes[1-lead]
	if _, err := nodes[lead].Append(ctx, "default", events(5, "fill", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, nodes[lead], 30*time.Second)

	var mu sync.Mutex
	var reasons []string
	var live atomic.Int32
	rec := newRecorder(0)
	stop := subscribe(t, other, "default", 0, rec, orisun.SubscribeOptions{
		OnCaughtUp: func(uint64) { live.Add(1) },
		OnFellBehind: func(_ uint64, reason string) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
		},
	})
	waitDelivered(t, rec, 5, 30*time.Second)
	testutil.Eventually(t, "the subscription on the node that does not lead to go live", 30*time.Second, 20*time.Millisecond,
		func() bool { return live.Load() > 0 })

	// Pause the leader: another application's stream takes the server's
	// memory, and JetStream refuses new messages. (orisun puts a changed
	// discard policy of its stream back: that no longer pauses it.)
	fillMemory(t, nodes[lead])
	if _, err := nodes[lead].Append(ctx, "default", events(3, "refused", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitState(t, nodes[lead], "default", "paused", 30*time.Second, nil)
	waitDelivered(t, rec, 8, 30*time.Second)
	mu.Lock()
	got := append([]string(nil), reasons...)
	mu.Unlock()
	found := false
	for _, r := range got {
		found = found || strings.Contains(r, "behind the store")
	}
	if !found {
		t.Fatalf("positions 6..8 arrived, but not through the store fall-back; reasons: %q", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, other, "default", 0, rec)
}
