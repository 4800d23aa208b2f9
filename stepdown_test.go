package orisun_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/status"
)

// TestStalledLeaderStepsDown_I2_I4_I5: three nodes on one PostgreSQL share
// an external NATS. Node A leads the boundary and publishes, then loses the
// right to publish into the event subjects (the NATS server's configuration
// is reloaded with a deny for A's user: A's connection, lease and store all
// still work, only its publishes go nowhere). A keeps renewing the lease,
// but once its publisher has made no progress for longer than
// ORISUN_STALL_THRESHOLD it steps down: it releases the lease, logs it
// once, says so in its status, and holds off, so that B or C takes over.
// The stream then holds every position once at its sequence (I2, I4), and a
// subscription on B receives every event exactly once, in order (I5).
func TestStalledLeaderStepsDown_I2_I4_I5(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	ns := usersNATS(t, &server.User{Username: "node-a", Password: "a"})

	cfg := func(user, password string) func(*orisun.Config) {
		return func(c *orisun.Config) {
			ns.join(c, url)
			c.NATSUser, c.NATSPassword = user, password
			c.LeaseTTL = 2 * time.Second
			c.StallThreshold = time.Second
		}
	}
	logs := &syncBuffer{}
	a := setup(t, "", cfg("node-a", "a"), orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if leaderOf(t, []*orisun.Node{a}, "default", 30*time.Second) != 0 {
		t.Fatal("node A does not lead")
	}
	appendSettled(t, ctx, a, events(20, "before", 64), 30*time.Second)
	b := setup(t, "", cfg("orisun", "s3cret"))
	c := setup(t, "", cfg("orisun", "s3cret"))
	nodes := []*orisun.Node{a, b, c}
	rec := newRecorder(0)
	stop := subscribe(t, b, "default", 0, rec, orisun.SubscribeOptions{})
	waitDelivered(t, rec, 20, 30*time.Second)
	if l := leaderOf(t, nodes, "default", 30*time.Second); l != 0 {
		t.Fatalf("node %d leads before the fault, want A", l)
	}

	// A may no longer publish into the event subjects.
	broken := ns.opts.Clone()
	for _, u := range broken.Users {
		if u.Username == "node-a" {
			u.Permissions = &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{"orisun.events.>"}}}
		}
	}
	if err := ns.ReloadOptions(broken); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, "default", events(20, "after", 64), nil); err != nil {
		t.Fatal(err)
	}

	// Another node takes over; meanwhile A's status says why it let go.
	var reasonA string
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		if st, err := a.Status(ctx); err == nil && strings.Contains(st.Boundaries[0].Reason, "stepped down") {
			reasonA = st.Boundaries[0].Reason
		}
		led := -1
		for i, n := range nodes[1:] {
			if st, err := n.Status(ctx); err == nil && st.Boundaries[0].State == status.StateLeading {
				led = i + 1
			}
		}
		if led > 0 && reasonA != "" {
			t.Logf("node %d took over %s after the fault; A's status: %s", led, time.Since(start).Round(time.Millisecond), reasonA)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no takeover by B or C within 90s of A's publishes being refused (A's reason seen: %q)\nA's log:\n%s", reasonA, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(reasonA, "ORISUN_STALL_THRESHOLD") || !strings.Contains(reasonA, "another node") {
		t.Fatalf("A's status reason %q does not say that it stepped down after a stall", reasonA)
	}
	waitSettled(t, b, 60*time.Second)
	if first, last := checkStream(t, c, "default"); first != 1 || last != 40 {
		t.Fatalf("stream %d..%d, want 1..40 (I2, I4)", first, last)
	}
	waitDelivered(t, rec, 40, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, b, "default", 0, rec)
	if n := strings.Count(logs.String(), "stepped down: the leader work made no progress"); n != 1 {
		t.Fatalf("A logged its step-down %d times, want once:\n%s", n, logs.String())
	}
}
