package orisun

import "testing"

// TestPlacementOnlyOnPostgres: a SQLite node on an external NATS is alone
// with its store and must lead every boundary; only PostgreSQL nodes on a
// shared NATS spread the leases (review of issue 9: two SQLite nodes on one
// NATS would otherwise yield boundaries to nodes that cannot lead them).
func TestPlacementOnlyOnPostgres(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Backend: "sqlite", NATSURL: "nats://n1:4222"}, false},
		{Config{Backend: "postgres", NATSURL: "nats://n1:4222"}, true},
		{Config{Backend: "postgres", NATSClusterName: "c"}, true},
		{Config{Backend: "postgres"}, false},
	} {
		if got := c.cfg.Placement(); got != c.want {
			t.Errorf("%+v: Placement() = %v, want %v", c.cfg, got, c.want)
		}
	}
}
