package cluster

import (
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestStartGroupRetriesTakenPort: a port picked for a child and taken by
// another process before the child binds it (here: held by the test) makes
// the child exit; startGroup then starts the group again on new ports, and
// the group it returns runs with its own ports.
func TestStartGroupRetriesTakenPort(t *testing.T) {
	takenPort := testutil.TakenPort(t)
	var first []*proc
	picks := 0
	pick := func(t testing.TB, n int) []int {
		picks++
		ports := testutil.FreePorts(t, n)
		if picks == 1 {
			ports[0] = takenPort // the client port of the only server
		}
		return ports
	}
	servers, attempts := startGroup(t, "1 nats-server process", 2, pick, func(ports []int) []*proc {
		ps := launchNATSCluster(t, 1, ports)
		if first == nil {
			first = ps
		}
		return ps
	}, natsUp, 60*time.Second)
	if attempts != 2 || picks != 2 {
		t.Fatalf("started after %d attempt(s) with %d pick(s) of ports; want 2 and 2 (the first port taken)", attempts, picks)
	}
	if !first[0].bindFailed() {
		t.Fatalf("the first attempt's server did not report its port taken:\n%s", first[0].Tail(20))
	}
	if servers[0].Exited() || !natsUp(servers[0]) {
		t.Fatalf("the second attempt's server does not run on its port:\n%s", servers[0].Tail(20))
	}
}
