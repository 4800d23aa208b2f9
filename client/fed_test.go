package client

import (
	"testing"
	"time"

	"github.com/orisun-io/orisun/status"
)

// TestFedWithSharedNATS: a subscription goes live when the node that
// answers its status request leads the boundary; with a shared NATS (an
// embedded cluster or an external deployment, where any node may answer)
// also when another node holds an unexpired lease, and not when the lease
// has run out, nobody holds it, or the answering node holds it while its
// publisher does not lead (stalled, paused). With a NATS of the node's own only its
// own leading publisher feeds the stream.
func TestFedWithSharedNATS(t *testing.T) {
	now := time.Now().UTC()
	for _, c := range []struct {
		kind, state, holder string
		expires             time.Time
		want                bool
	}{
		{"embedded", "leading", "n1#a", now.Add(time.Second), true},
		{"embedded", "standby", "n2#b", now.Add(time.Second), false},
		{"embedded-cluster", "standby", "n2#b", now.Add(time.Second), true},
		{"external", "standby", "n2#b", now.Add(time.Second), true},
		{"external", "standby", "n2#b", now.Add(-time.Second), false},
		{"embedded-cluster", "standby", "", time.Time{}, false},
		{"external", "leading", "n1#a", now.Add(-time.Second), true},
		// The answering node holds the lease but its publisher stalled.
		{"external", "stalled", "n1#a", now.Add(time.Second), false},
		{"embedded-cluster", "paused", "n1#a", now.Add(time.Second), false},
	} {
		st := status.Status{Time: now, LeaseHolder: "n1#a", NATS: status.Health{OK: true, Kind: c.kind}}
		b := status.BoundaryStatus{Name: "default", State: status.State(c.state), LeaseHolder: c.holder, LeaseExpires: c.expires}
		if got := fed(st, b); got != c.want {
			t.Errorf("NATS %s, publisher %s, lease %q expiring %s after the status: fed %v, want %v",
				c.kind, c.state, c.holder, c.expires.Sub(now), got, c.want)
		}
	}
}
