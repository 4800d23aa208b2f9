package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// loader appends 10-event batches through one client until halted. A
// failed append is retried with the same event ids (an idempotent retry),
// so every batch ends acknowledged; it records each acknowledged position
// and its event id.
type loader struct {
	c      *client.Client
	mu     sync.Mutex
	acked  map[uint64]string
	failed int
	lastEr error
	halt   func()
}

func startLoader(t *testing.T, c *client.Client) *loader {
	l := &loader{c: c, acked: map[uint64]string{}}
	i := 0
	l.halt = testutil.Every(t, 5*time.Millisecond, func(halted context.Context) {
		in := make([]event.Input, 10)
		for j := range in {
			in[j] = event.Input{ID: event.NewID(), Type: "scaleout.test", Data: json.RawMessage(fmt.Sprintf(`{"i":%d,"j":%d}`, i, j))}
		}
		i++
		for {
			// A short timeout: a request that went to the node just
			// killed is retried soon (with the same ids), so the load
			// goes on through the takeover.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := c.Append(ctx, "default", in, nil)
			cancel()
			l.mu.Lock()
			if err == nil {
				for j := range in {
					l.acked[res.First+uint64(j)] = in[j].ID
				}
			} else {
				l.failed++
				l.lastEr = err
			}
			l.mu.Unlock()
			if err == nil {
				return
			}
			select {
			case <-halted.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return l
}

// collector is a subscription's record: every delivered position must be
// the one after the last (exactly once, in order); the first violation is
// kept.
type collector struct {
	mu        sync.Mutex
	last      uint64
	ids       map[uint64]string
	violation string
	live      int
}

func (c *collector) handle(_ context.Context, e event.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Position != c.last+1 && c.violation == "" {
		c.violation = fmt.Sprintf("position %d delivered after %d", e.Position, c.last)
	}
	if _, dup := c.ids[e.Position]; dup && c.violation == "" {
		c.violation = fmt.Sprintf("position %d delivered twice", e.Position)
	}
	c.ids[e.Position] = e.ID
	c.last = max(c.last, e.Position)
	return nil
}

func (c *collector) delivered() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// storeIDs reads the boundary's events 1..head through the API.
func storeIDs(t *testing.T, c *client.Client, head uint64) map[uint64]string {
	t.Helper()
	ids := map[uint64]string{}
	for after := uint64(0); after < head; {
		res, err := c.Read(contextFor(t, 30*time.Second), "default", after, 1000, nil)
		if err != nil {
			t.Fatalf("read after %d: %v", after, err)
		}
		if len(res.Events) == 0 {
			t.Fatalf("read after %d: no events, head %d", after, head)
		}
		for _, e := range res.Events {
			ids[e.Position] = e.ID
		}
		after = res.Events[len(res.Events)-1].Position
	}
	return ids
}

// checkStream reads every message of the boundary's stream through url
// and checks that it holds 1..head, sequence s carrying position s and the
// store's event (I2); it returns the stream's info.
func checkStream(t *testing.T, url string, opts []nats.Option, ids map[uint64]string, head uint64) *jetstream.StreamInfo {
	t.Helper()
	ctx := contextFor(t, 120*time.Second)
	js := jsConnect(t, url, opts...)
	s, err := js.Stream(ctx, stream.Name("default"))
	if err != nil {
		t.Fatalf("the stream after the kill: %v", err)
	}
	info := s.CachedInfo()
	if info.State.FirstSeq != 1 || info.State.LastSeq != head || info.State.Msgs != head {
		t.Fatalf("the stream holds %d messages %d..%d after the kill; want all of 1..%d (the killed leader's included)",
			info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, head)
	}
	// One message at a time, each read retried: right after a server of
	// the cluster died, a JetStream API request may find no responder for
	// a moment while the stream's Raft group settles.
	for seq := uint64(1); seq <= head; seq++ {
		var msg *jetstream.RawStreamMsg
		testutil.Eventually(t, fmt.Sprintf("stream message %d", seq), 30*time.Second, 100*time.Millisecond, func() bool {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			msg, err = s.GetMsg(rctx, seq)
			return err == nil
		})
		pos, id := msg.Header.Get(stream.HeaderPosition), msg.Header.Get(stream.HeaderEventID)
		if msg.Sequence != seq || pos != strconv.FormatUint(seq, 10) || id != ids[seq] {
			t.Fatalf("I2: stream sequence %d (read %d) carries position %s, event %s; the store has %s",
				seq, msg.Sequence, pos, id, ids[seq])
		}
	}
	return info
}

// streamLeaderOf names the NATS server that leads the boundary's stream's
// Raft group (an embedded server is named after its node id).
func streamLeaderOf(t *testing.T, url string, opts []nats.Option) string {
	t.Helper()
	// Its own connection, closed on return: callers poll it.
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := natstest.JetStream(t, nc)
	s, err := js.Stream(contextFor(t, 10*time.Second), stream.Name("default"))
	if err != nil {
		t.Fatal(err)
	}
	if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader != "" {
		return info.Cluster.Leader
	}
	return "(none)"
}

// watchStreamLeader polls, through url, who leads the boundary's stream's
// Raft group from killed on, and sends on the channel when a server other
// than dead leads it (the time since killed; requests unanswered during an
// election wait up to 1 s, so it may be late by that), or that none did within
// limit. It only measures: the test's assertions do not wait on it.
func watchStreamLeader(url string, opts []nats.Option, dead string, killed time.Time, limit time.Duration) <-chan string {
	out := make(chan string, 1)
	go func() {
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			out <- "not measured: " + err.Error()
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			out <- "not measured: " + err.Error()
			return
		}
		for time.Since(killed) < limit {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s, err := js.Stream(ctx, stream.Name("default"))
			cancel()
			if err == nil {
				if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != dead {
					out <- fmt.Sprintf("%s, seen leading %s after the kill", info.Cluster.Leader, time.Since(killed).Round(time.Millisecond))
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		out <- fmt.Sprintf("none within %s", limit)
	}()
	return out
}

// moveStreamLeader makes the NATS server named want lead the boundary's
// stream's Raft group: while another server leads it, it asks JetStream to
// step the stream's leader down with want as the preferred new leader
// ($JS.API.STREAM.LEADER.STEPDOWN with a placement, nats-server 2.11 on),
// and waits until the stream info names want.
func moveStreamLeader(t *testing.T, url string, opts []nats.Option, want string) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
	if err != nil {
		t.Fatal(err)
	}
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + stream.Name("default")
	var asked time.Time
	var last string
	testutil.Eventually(t, "the stream's Raft leader to move to "+want, 90*time.Second, 100*time.Millisecond, func() bool {
		leader := streamLeaderOf(t, url, opts)
		if leader == want {
			return true
		}
		// Ask again when a step-down did not take (an election may
		// elect another server, or the request found no leader).
		if time.Since(asked) > 5*time.Second {
			asked = time.Now()
			msg, err := nc.Request(subject, req, 5*time.Second)
			switch {
			case err != nil:
				last = err.Error()
			default:
				last = string(msg.Data)
			}
			t.Logf("the stream's Raft leader is %s: asked it to step down to %s: %s", leader, want, last)
		}
		return false
	})
}

// takeoverBound is how long the test waits, after the SIGKILL, for a
// surviving node to hold a newer lease term and checkpoint new events: the
// lease TTL; when the killed node led the stream's Raft group, an election
// (nats-server's election timeout is 4–9 s; a split vote takes another);
// the publisher's retries; and as much again as slack for a loaded
// two-core machine. Measured: 1.5–2.2 s, and 4.5–9.0 s when the stream's
// leader was killed too (docs/deployment.md). A publisher that waits for
// an answer that never comes (the ordered consumer's endless re-creation
// that once hung a takeover: minutes) exceeds it.
func takeoverBound(ttl time.Duration) time.Duration { return ttl + 40*time.Second }

// failover is the scenario both tests run on three orisun nodes that share
// one NATS: appends through node A (a node that does not lead), a
// subscriber (the Go client) connected to node C (the third), the leader
// killed with SIGKILL during the load. Another node takes over within
// takeoverBound; the subscriber receives every position exactly once
// in order; the three-replica stream holds every message, the ones the
// killed leader published included. natsOpts log the test's clients in.
// afterTakeover, when set, runs a further fault under the load.
// killStreamLeader makes the leader's NATS server lead the stream's Raft
// group before the kill (embedded NATS only), so that the survivors must
// elect a stream leader before the new lease holder can publish.
func failover(t *testing.T, pgURL string, nodes []*proc, ttl time.Duration, natsOpts []nats.Option, killStreamLeader bool, afterTakeover func()) {
	t.Helper()
	lead := waitLeading(t, nodes, "one node to lead the boundary", 90*time.Second)
	a, c := nodes[(lead+1)%3], nodes[(lead+2)%3]
	t.Logf("%s leads; appends through %s, the subscriber is on %s", nodes[lead].Name, a.Name, c.Name)
	copts := []client.Option{client.Name("scaleout-test"), client.NATSOptions(natsOpts...)}
	ca := natstest.Client(t, a.nats, copts...)
	cc := natstest.Client(t, c.nats, copts...)

	col := &collector{ids: map[uint64]string{}}
	sctx, stopSub := context.WithCancel(context.Background())
	var subErr error
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		subErr = cc.Subscribe(sctx, "default", 0, col.handle, client.SubscribeOptions{
			OnCaughtUp: func(uint64) { col.mu.Lock(); col.live++; col.mu.Unlock() },
		})
	}()
	defer func() { stopSub(); <-subDone }()

	load := startLoader(t, ca)
	published := func(p *proc) uint64 {
		st, err := p.status()
		if err != nil {
			return 0
		}
		b, _ := boundary(st, "default")
		return b.Published
	}
	testutil.Eventually(t, "the leader to publish 300 events", 60*time.Second, 50*time.Millisecond, func() bool { return published(c) > 300 })
	testutil.Eventually(t, "the subscriber to reach position 300", 60*time.Second, 50*time.Millisecond, func() bool { return col.delivered() >= 300 })

	// The subscriber's node does not lead: with a shared NATS the stream it
	// can go live on is fed all the same.
	testutil.Eventually(t, fmt.Sprintf("the subscriber on %s (not leading) to go live on the shared stream", c.Name), 30*time.Second, 50*time.Millisecond,
		func() bool { col.mu.Lock(); defer col.mu.Unlock(); return col.live > 0 })

	store := openStore(t, pgURL, 2)
	dbCtx := func() context.Context { return contextFor(t, 10*time.Second) }
	before, err := store.LeaseHolder(dbCtx(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if killStreamLeader {
		moveStreamLeader(t, c.nats, natsOpts, nodes[lead].Name)
		// Still the lease holder, publishing, after the leader change.
		if l := leading(nodes, "default"); len(l) != 1 || l[0] != lead {
			t.Fatalf("after moving the stream's Raft leader, the nodes leading the boundary are %v; want only %s", l, nodes[lead].Name)
		}
		before, err = store.LeaseHolder(dbCtx(), "default")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(before.Holder, nodes[lead].Name+"#") {
			t.Fatalf("the lease is held by %q after moving the stream's Raft leader; want %s", before.Holder, nodes[lead].Name)
		}
	}
	streamLeader := streamLeaderOf(t, c.nats, natsOpts)
	if killStreamLeader && streamLeader != nodes[lead].Name {
		t.Fatalf("the stream's Raft leader is %s, not the lease holder %s, at the kill", streamLeader, nodes[lead].Name)
	}
	logFrom := make([]int, len(nodes))
	for i, n := range nodes {
		logFrom[i] = n.LineCount()
	}
	nodes[lead].Kill(t)
	killed := time.Now()
	election := watchStreamLeader(c.nats, natsOpts, nodes[lead].Name, killed, takeoverBound(ttl))
	atKill, err := store.Checkpoint(dbCtx(), "default")
	if err != nil {
		t.Fatal(err)
	}
	// Takeover, read in the store: a newer lease term, then the checkpoint
	// moved past where it was when that term was first seen (only the new
	// term's publisher can move it then: the killed leader's last write,
	// already sent, may still land after the kill, but once a newer term
	// exists the store refuses the old term's writes). Bound: takeoverBound.
	var leased time.Duration
	var after backend.Lease
	var atLease uint64
	testutil.Eventually(t, "a surviving node to take the lease and publish", takeoverBound(ttl), 25*time.Millisecond, func() bool {
		if leased == 0 {
			l, err := store.LeaseHolder(dbCtx(), "default")
			if err != nil || l.Term <= before.Term {
				return false
			}
			cp, err := store.Checkpoint(dbCtx(), "default")
			if err != nil {
				return false
			}
			leased, after, atLease = time.Since(killed), l, cp
		}
		cp, err := store.Checkpoint(dbCtx(), "default")
		return err == nil && cp > atLease
	})
	took := time.Since(killed)
	elected := <-election
	// The new holder's /status says so.
	newLead := waitLeading(t, nodes, "the new lease holder's /status to say leading", 30*time.Second)
	t.Logf("takeover: %s (term %d) killed with SIGKILL at checkpoint %d, the stream's Raft leader being %s; %s took the lease (term %d) "+
		"%s after the kill and checkpointed new events %s after it (lease TTL %s); the stream's leader after the kill: %s",
		nodes[lead].Name, before.Term, atKill, streamLeader, after.Holder, after.Term, leased.Round(time.Millisecond), took.Round(time.Millisecond), ttl, elected)
	// What the new holder's publisher and lease said meanwhile.
	nl := nodes[newLead]
	var said []string
	for _, line := range nl.LinesFrom(logFrom[newLead]) {
		if strings.Contains(line, "component=publisher") || strings.Contains(line, "component=lease") {
			said = append(said, line)
		}
	}
	t.Logf("%s's publisher and lease after the kill:\n%s", nl.Name, strings.Join(said[:min(len(said), 40)], "\n"))

	if afterTakeover != nil {
		afterTakeover()
	}
	time.Sleep(time.Second)
	load.halt()
	load.mu.Lock()
	t.Logf("%d events acknowledged through %s; %d appends failed and were retried (last error: %v)", len(load.acked), a.Name, load.failed, load.lastEr)
	load.mu.Unlock()

	var head uint64
	testutil.Eventually(t, "the new leader to publish up to the head", 60*time.Second, 100*time.Millisecond, func() bool {
		st, err := nodes[newLead].status()
		if err != nil {
			return false
		}
		b, _ := boundary(st, "default")
		head = b.Head
		return st.Settled && b.Published == b.Head
	})
	testutil.Eventually(t, fmt.Sprintf("the subscriber on %s to reach the head %d", c.Name, head), 60*time.Second, 50*time.Millisecond,
		func() bool { return col.delivered() >= head })
	stopSub()
	<-subDone
	if subErr != nil && !errors.Is(subErr, context.Canceled) {
		t.Fatalf("the subscription on %s ended: %v", c.Name, subErr)
	}

	ids := storeIDs(t, cc, head)
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.violation != "" {
		t.Fatalf("I5: the subscriber on %s: %s", c.Name, col.violation)
	}
	if uint64(len(col.ids)) != head || col.last != head {
		t.Fatalf("I5: the subscriber on %s got %d positions up to %d; the head is %d", c.Name, len(col.ids), col.last, head)
	}
	for pos, id := range ids {
		if col.ids[pos] != id {
			t.Fatalf("I5: position %d delivered as %s; the store has %s", pos, col.ids[pos], id)
		}
	}
	load.mu.Lock()
	for pos, id := range load.acked {
		if ids[pos] != id {
			t.Fatalf("acknowledged append lost: position %d should hold %s, holds %q", pos, id, ids[pos])
		}
	}
	load.mu.Unlock()
	info := checkStream(t, c.nats, natsOpts, ids, head)
	if info.Config.Replicas != 3 {
		t.Fatalf("the stream has %d replicas, want 3", info.Config.Replicas)
	}
	var peers []string
	if info.Cluster != nil {
		peers = append(peers, info.Cluster.Leader+" (leader)")
		for _, r := range info.Cluster.Replicas {
			peers = append(peers, fmt.Sprintf("%s (current %v, offline %v)", r.Name, r.Current, r.Offline))
		}
	}
	t.Logf("the subscriber on %s got 1..%d exactly once in order and went live %d time(s); the stream holds 1..%d on %v",
		c.Name, head, col.live, head, peers)
}

// TestEmbeddedClusterLeaderSIGKILL: three orisun processes on one
// PostgreSQL, their embedded NATS servers clustered by routes, streams with
// three replicas. The boundary's leader is killed with SIGKILL, its NATS
// server with it: another node takes over, the subscriber connected to a
// third node gets every position exactly once in order, and the stream
// survives the loss of the node with every message.
func TestEmbeddedClusterLeaderSIGKILL(t *testing.T) {
	ttl := 2 * time.Second
	pgURL := pgtest.URL(t)
	nodes := embeddedCluster(t, pgURL, 3, ttl)
	failover(t, pgURL, nodes, ttl, nil, false, nil)
}

// TestEmbeddedClusterStreamLeaderSIGKILL is TestEmbeddedClusterLeaderSIGKILL
// with the killed node leading the stream's Raft group as well (the test
// moves the stream's leader there first): the new lease holder meets a
// stream without a leader until the two survivors elect one, reports the
// stall, and publishes once the stream has a leader again.
func TestEmbeddedClusterStreamLeaderSIGKILL(t *testing.T) {
	ttl := 2 * time.Second
	pgURL := pgtest.URL(t)
	// Moving the stream's Raft leader is an operator's JetStream request
	// that the application principal may not send: these nodes run the
	// faultinject build with the permission model off, the only way a
	// test client gets that right on an embedded server.
	nodes := embeddedCluster(t, pgURL, 3, ttl, "ORISUN_FAULT_NATS_OPEN=1")
	failover(t, pgURL, nodes, ttl, nil, true, nil)
}

// TestExternalNATSClusterLeaderSIGKILL: three orisun processes on one
// PostgreSQL against a three-server NATS cluster (nats-server processes
// with JetStream, users and routes) given by ORISUN_NATS_URL; streams with
// three replicas. The leading orisun is killed with SIGKILL: another takes
// over and the subscriber gets every position exactly once. Then one NATS
// server is killed too (neither of the test clients' servers): the
// three-replica stream goes on with two, and still holds every message.
func TestExternalNATSClusterLeaderSIGKILL(t *testing.T) {
	ttl := 2 * time.Second
	servers := natsCluster(t, 3)
	pgURL := pgtest.URL(t)
	nodes := externalNodes(t, pgURL, servers, 3, ttl, "ORISUN_NATS_STREAM_REPLICAS=3")
	opts := []nats.Option{nats.UserInfo(natsAppUser, natsAppPassword)}
	failover(t, pgURL, nodes, ttl, opts, false, func() {
		// The test's clients are on the servers of the surviving nodes
		// (node i's client on server i); kill the killed node's server.
		for i, n := range nodes {
			if n.Exited() {
				servers[i].Kill(t)
				t.Logf("%s killed with SIGKILL as well", servers[i].Name)
			}
		}
	})
}

// jsConnect connects a JetStream client through url; the connection ends
// with the test.
func jsConnect(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc := natstest.Connect(t, url, opts...)
	js := natstest.JetStream(t, nc)
	return js
}
