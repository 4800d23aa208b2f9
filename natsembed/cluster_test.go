package natsembed_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testcert"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// TestClusterRouteAuthAndTLS: three embedded servers join one cluster over
// TLS routes with a route user and password (every server gets the same
// route list, its own included), and clustered JetStream elects a meta
// leader; a fourth server with the wrong route password is not admitted.
func TestClusterRouteAuthAndTLS(t *testing.T) {
	certs := testcert.Write(t, t.TempDir())
	// The routes must be known before the servers start: a JetStream
	// cluster needs them on every server.
	ports := testutil.FreePorts(t, 4)
	var routes []string
	for _, p := range ports[:3] {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	tlsCfg := &natsembed.TLS{CertFile: certs.PeerCert, KeyFile: certs.PeerKey, CAFile: certs.CA}
	start := func(i int, password string) *natsembed.Server {
		return natstest.Server(t, natsembed.Config{
			ServerName: fmt.Sprintf("n%d", i),
			Cluster: &natsembed.Cluster{
				Name: "c", Port: ports[i], Routes: routes,
				User: "route", Password: password, TLS: tlsCfg,
			},
		})
	}
	var servers []*natsembed.Server
	for i := range 3 {
		servers = append(servers, start(i, "route-secret"))
	}
	intruder := start(3, "wrong")

	// Clustered JetStream works over these routes: an R3 stream can be
	// created (it needs a meta leader and three JetStream servers).
	nc, err := servers[0].Connect("probe")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := natstest.JetStream(t, nc)
	testutil.Until(t, "an R3 stream", 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Storage: jetstream.MemoryStorage, Replicas: 3})
		cancel()
		if err == nil {
			return nil
		}
		routes := make([][]string, len(servers))
		for i, s := range servers {
			routes[i] = s.Peers()
		}
		return fmt.Errorf("%w (the servers route to %v)", err, routes)
	})
	for i, s := range servers {
		peers := s.Peers()
		if len(peers) != 2 || slices.Contains(peers, "n3") {
			t.Fatalf("server %d routes to %v, want the two others and never n3", i, peers)
		}
	}
	if peers := intruder.Peers(); len(peers) != 0 {
		t.Fatalf("a server with the wrong route password routes to %v, want none", peers)
	}
}
