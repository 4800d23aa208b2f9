package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// leaders reads every running node's /status and returns, per boundary,
// the nodes whose publisher leads it, and per node how many it leads. A
// node whose status cannot be read counts as leading nothing.
func leaders(nodes []*proc) (map[string][]string, map[string]int) {
	by := map[string][]string{}
	counts := map[string]int{}
	for i, st := range statuses(nodes) {
		p := nodes[i]
		counts[p.Name] = 0
		for _, b := range st.Boundaries {
			if b.State == "leading" {
				by[b.Name] = append(by[b.Name], p.Name)
				counts[p.Name]++
			}
		}
	}
	return by, counts
}

// allLedOnce reports whether every boundary is led by exactly one node.
func allLedOnce(names []string, by map[string][]string) bool {
	for _, b := range names {
		if len(by[b]) != 1 {
			return false
		}
	}
	return true
}

// TestFiftyBoundariesSpreadAndMove: three orisun processes on one
// PostgreSQL, against an external three-server NATS cluster (nats-server
// processes; streams with one replica, since no NATS server is faulted
// here), with 50 boundaries, all started together. The leases spread: every
// boundary is led by exactly one node and no node leads more than its share
// (17, well under half). Then the node leading the most is killed with
// SIGKILL: within the lease TTL plus 15 s the two others lead all 50, each
// boundary exactly once, and then even out at 25 each; an event appended to
// each boundary afterwards is published.
func TestFiftyBoundariesSpreadAndMove(t *testing.T) {
	ttl := 2 * time.Second
	var names []string
	for i := range 50 {
		names = append(names, fmt.Sprintf("b%02d", i))
	}
	servers := natsCluster(t, 3)
	nodes := externalNodes(t, pgtest.URL(t), servers, 3, ttl, "ORISUN_BOUNDARIES="+strings.Join(names, ","))

	// fairly reports whether every boundary is led by exactly one of the
	// running nodes and none leads more than its fair share,
	// ceil(boundaries / nodes): at most half of them, with three nodes or
	// two.
	var counts map[string]int
	fairly := func(running int) bool {
		var by map[string][]string
		by, counts = leaders(nodes)
		if len(counts) != running || !allLedOnce(names, by) {
			return false
		}
		for _, n := range counts {
			if n > (len(names)+running-1)/running {
				return false
			}
		}
		return true
	}
	spread := testutil.Eventually(t, "all 50 boundaries led once, no node above its share of 17", 120*time.Second, 200*time.Millisecond,
		func() bool { return fairly(3) })
	t.Logf("spread %s after start: boundaries led per node %v", spread.Round(100*time.Millisecond), counts)

	victim := nodes[0]
	for _, p := range nodes {
		if counts[p.Name] > counts[victim.Name] {
			victim = p
		}
	}
	victimLed := counts[victim.Name]
	victim.Kill(t)
	killed := time.Now()
	var by map[string][]string
	testutil.Eventually(t, "the two survivors to lead all 50 boundaries", ttl+15*time.Second, 100*time.Millisecond, func() bool {
		by, counts = leaders(nodes)
		return allLedOnce(names, by)
	})
	took := time.Since(killed)
	if took > ttl+15*time.Second {
		t.Fatalf("the boundaries were led again %s after the SIGKILL; the bound is the lease TTL %s plus 15 s", took, ttl)
	}
	t.Logf("%s (leading %d) killed with SIGKILL; all 50 led again %s after (lease TTL %s): per node %v",
		victim.Name, victimLed, took.Round(time.Millisecond), ttl, counts)

	// Placement moves on: the survivors even out at 25 each.
	even := testutil.Eventually(t, "the two survivors to lead 25 each", 90*time.Second, 200*time.Millisecond, func() bool { return fairly(2) })
	t.Logf("evened out %s later: per node %v", even.Round(100*time.Millisecond), counts)

	// Every boundary is published by its new leader.
	var survivor *proc
	for _, p := range nodes {
		if !p.Exited() {
			survivor = p
		}
	}
	c, err := client.Connect(survivor.nats, client.NATSOptions(nats.UserInfo(natsAppUser, natsAppPassword)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, b := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Append(ctx, b, []event.Input{{Type: "placement.test", Data: json.RawMessage(`{"after":"kill"}`)}}, nil)
		cancel()
		if err != nil {
			t.Fatalf("append to %s: %v", b, err)
		}
	}
	testutil.Eventually(t, "every boundary published up to its head, in its stream", 60*time.Second, 200*time.Millisecond, func() bool {
		st, err := survivor.status()
		if err != nil || !st.Settled || len(st.Boundaries) != len(names) {
			return false
		}
		for _, b := range st.Boundaries {
			if b.Head != 1 || b.StreamLast != b.Head {
				return false
			}
		}
		return true
	})
}
