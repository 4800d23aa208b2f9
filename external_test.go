package orisun_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// usersNATS starts a NATS server with JetStream and users in the test
// process: the NATS deployment a user already runs. orisun logs in as
// "orisun"; clients without credentials (the test's stream checks) are
// "reader".
func usersNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		ServerName: "users-nats",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoSigs:     true,
		Users: []*server.User{
			{Username: "orisun", Password: "s3cret"},
			{Username: "reader", Password: "r"},
		},
		NoAuthUser: "reader",
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("the user's NATS server is not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
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
	external := func(c *orisun.Config) {
		c.Backend, c.PGURL = "postgres", url
		c.NATSURL = ns.ClientURL()
		c.NATSUser, c.NATSPassword = "orisun", "s3cret"
	}
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
	deadline := time.Now().Add(30 * time.Second)
	for !wentLive.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the subscription on the node that does not lead never went live on the external stream")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
