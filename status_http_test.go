package orisun_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/status"
)

// waitReadyz waits up to timeout (what names the wait) for n's /readyz to
// answer code with a body that holds each of words, and returns the body.
func waitReadyz(t testing.TB, n *orisun.Node, what string, timeout time.Duration, code int, words ...string) string {
	t.Helper()
	var body string
	testutil.Until(t, what, timeout, 50*time.Millisecond, func() error {
		var got int
		got, body = httpGet(t, n, "/readyz")
		if got != code {
			return fmt.Errorf("/readyz: %d %s", got, body)
		}
		for _, w := range words {
			if !strings.Contains(body, w) {
				return fmt.Errorf("/readyz: %d %s", got, body)
			}
		}
		return nil
	})
	return body
}

// httpGet returns the status code and body of a GET on the node's status
// listener.
func httpGet(t testing.TB, n *orisun.Node, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Get("http://" + n.HTTPAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// httpStatus reads /status.
func httpStatus(t testing.TB, n *orisun.Node) orisun.Status {
	t.Helper()
	code, body := httpGet(t, n, "/status")
	if code != http.StatusOK {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st orisun.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v: %s", err, body)
	}
	return st
}

// boundaryOf returns the boundary's part of a status.
func boundaryOf(t testing.TB, st orisun.Status, name string) orisun.BoundaryStatus {
	t.Helper()
	for _, b := range st.Boundaries {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("status has no boundary %q: %+v", name, st)
	return orisun.BoundaryStatus{}
}

// metric returns the value of the sample of /metrics whose name and labels
// (in the exposition's order, e.g. `boundary="default",state="leading"`)
// are given; ok is false when there is no such sample.
func metric(body, name, labels string) (v float64, ok bool) {
	want := name
	if labels != "" {
		want += "{" + labels + "}"
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, found := strings.CutPrefix(line, want+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func wantMetric(t testing.TB, body, name, labels string, want float64) {
	t.Helper()
	v, ok := metric(body, name, labels)
	if !ok {
		t.Fatalf("/metrics has no sample %s{%s}:\n%s", name, labels, grepLines(body, "orisun_"))
	}
	if v != want {
		t.Fatalf("/metrics %s{%s} = %v, want %v", name, labels, v, want)
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitState polls /status until the boundary's publisher on n is in state
// and ok (when given) accepts it.
func waitState(t testing.TB, n *orisun.Node, boundary string, state string, timeout time.Duration, ok func(orisun.BoundaryStatus) bool) orisun.BoundaryStatus {
	t.Helper()
	var last orisun.BoundaryStatus
	testutil.Until(t, fmt.Sprintf("boundary %s to reach state %s", boundary, state), timeout, 50*time.Millisecond, func() error {
		st := httpStatus(t, n)
		for _, b := range st.Boundaries {
			if b.Name == boundary {
				last = b
			}
		}
		if string(last.State) == state && (ok == nil || ok(last)) {
			return nil
		}
		return fmt.Errorf("last: %+v", last)
	})
	return last
}

func withHTTP(c *orisun.Config) { c.HTTPAddr = "127.0.0.1:0" }

// TestStatusLeadingAndStandby_I7: two nodes on one PostgreSQL database; the
// lease holder's /status and /metrics say leading, the other's standby with
// the holder named, and both report the same measured head and checkpoint.
func TestStatusLeadingAndStandby_I7(t *testing.T) {
	url := pgtest.URL(t)
	pg := func(c *orisun.Config) { withHTTP(c); c.Backend, c.PGURL = "postgres", url }
	a := setup(t, "", func(c *orisun.Config) { pg(c); c.NodeID = "node-a" })
	waitState(t, a, "default", "leading", 30*time.Second, nil)
	b := setup(t, "", func(c *orisun.Config) { pg(c); c.NodeID = "node-b" })
	ctx := context.Background()
	appendSettled(t, ctx, a, events(7, "status.test", 64), 30*time.Second)

	sa := waitState(t, a, "default", "leading", 10*time.Second, func(s orisun.BoundaryStatus) bool { return s.Published == 7 })
	sb := waitState(t, b, "default", "standby", 10*time.Second, nil)
	if !strings.Contains(sb.Reason, "lease held by node-a#") {
		t.Fatalf("standby reason %q does not name the holder", sb.Reason)
	}
	for _, s := range []orisun.BoundaryStatus{sa, sb} {
		if s.Head != 7 || s.Published != 7 || s.LagEvents != 0 || !strings.HasPrefix(s.LeaseHolder, "node-a#") || s.LeaseTerm == 0 || s.Epoch == "" || s.Error != "" {
			t.Fatalf("status of a settled boundary: %+v", s)
		}
	}
	if sa.StreamFirst != 1 || sa.StreamLast != 7 || sa.StreamMsgs != 7 || sa.StreamBytes == 0 {
		t.Fatalf("leader's stream figures: %+v", sa)
	}
	stA := httpStatus(t, a)
	if !stA.Settled || !stA.Store.OK || stA.Store.Kind != "postgres" || !stA.NATS.OK || stA.NodeID != "node-a" {
		t.Fatalf("node-a's status: %+v", stA)
	}

	_, ma := httpGet(t, a, "/metrics")
	_, mb := httpGet(t, b, "/metrics")
	wantMetric(t, ma, "orisun_publisher_state", `boundary="default",state="leading"`, 1)
	wantMetric(t, ma, "orisun_publisher_state", `boundary="default",state="standby"`, 0)
	wantMetric(t, ma, "orisun_lease_held", `boundary="default"`, 1)
	wantMetric(t, ma, "orisun_boundary_head_position", `boundary="default"`, 7)
	wantMetric(t, ma, "orisun_boundary_published_position", `boundary="default"`, 7)
	wantMetric(t, ma, "orisun_stream_last_sequence", `boundary="default"`, 7)
	wantMetric(t, ma, "orisun_settled", "", 1)
	wantMetric(t, ma, "orisun_store_up", `backend="postgres"`, 1)
	wantMetric(t, mb, "orisun_publisher_state", `boundary="default",state="standby"`, 1)
	wantMetric(t, mb, "orisun_publisher_state", `boundary="default",state="leading"`, 0)
	wantMetric(t, mb, "orisun_lease_held", `boundary="default"`, 0)
	wantMetric(t, mb, "orisun_boundary_published_position", `boundary="default"`, 7)

	for _, n := range []*orisun.Node{a, b} {
		if code, body := httpGet(t, n, "/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		if code, body := httpGet(t, n, "/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("/healthz: %d %s", code, body)
		}
	}

	// The leader stops: the standby takes over, and says so.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, "default", "leading", 30*time.Second, nil)
	_, mb = httpGet(t, b, "/metrics")
	wantMetric(t, mb, "orisun_lease_held", `boundary="default"`, 1)
}

// TestStatusPausedAndRecovers_I7: JetStream refuses the publishes for its
// own limits (the NATS server's memory is full: another stream took it, a
// refusal every node would meet alike): the publisher is paused with
// JetStream's reason, nothing is skipped, and once JetStream accepts again
// it is leading with the reason cleared. (This test used to set
// discard-new on the stream at its message limit; orisun now puts the
// stream's discard policy back within a poll interval, docs/design.md §12.)
func TestStatusPausedAndRecovers_I7(t *testing.T) {
	logs := &logCounter{}
	ns := smallNATS(t, 1<<20)
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.NATSURL = ns.ClientURL()
		c.EventStreamMaxBytes = 64 << 10
	}, orisun.WithLogger(slog.New(logs)))
	ctx := context.Background()
	appendSettled(t, ctx, n, events(5, "fill", 32), 30*time.Second)
	fillMemory(t, n)
	mustAppend(t, ctx, n, "default", events(3, "refused", 32))
	p := waitState(t, n, "default", "paused", 30*time.Second, nil)
	if !strings.Contains(p.Reason, "insufficient") || p.Head != 8 || p.Published != 5 || p.LagEvents != 3 || p.Since.IsZero() {
		t.Fatalf("paused status: %+v", p)
	}
	// The oldest unpublished event ages while the publisher is paused.
	waitState(t, n, "default", "paused", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.LagSeconds >= 0.5 })
	t.Logf("paused: %q", p.Reason)
	// The publisher retries with backoff (0.1s, 0.2s, 0.4s, …) while
	// paused; the state change is logged once, not once per retry.
	time.Sleep(1500 * time.Millisecond)
	if got := logs.count("publisher paused"); got != 1 {
		t.Fatalf("\"publisher paused\" logged %d times at info or above, want once", got)
	}
	_, m := httpGet(t, n, "/metrics")
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="paused"`, 1)
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="leading"`, 0)
	wantMetric(t, m, "orisun_boundary_lag_events", `boundary="default"`, 3)
	wantMetric(t, m, "orisun_settled", "", 0)
	if st := httpStatus(t, n); st.Settled {
		t.Fatalf("settled while 3 events wait: %+v", st)
	}

	if err := jsOf(t, n).DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	l := waitState(t, n, "default", "leading", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 8 })
	if strings.Contains(l.Reason, "maximum") || l.LagEvents != 0 {
		t.Fatalf("recovered status still carries the pause: %+v", l)
	}
	_, m = httpGet(t, n, "/metrics")
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="paused"`, 0)
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="leading"`, 1)
	if got := logs.count("publisher leading"); got != 2 {
		t.Fatalf("\"publisher leading\" logged %d times at info or above, want twice (start, recovery)", got)
	}
	// Nothing was skipped: the stream's last sequence is the head.
	if _, last := checkStream(t, n, "default"); last != 8 {
		t.Fatalf("stream ends at %d, want 8", last)
	}
}

// smallNATS starts a NATS server with JetStream and maxMemory bytes of
// memory storage, in the test process.
func smallNATS(t testing.TB, maxMemory int64) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{ServerName: "small-nats", Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamMaxMemory: maxMemory, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("the NATS server is not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// fillMemory fills the node's NATS server's memory storage with a stream
// of another application, FILLER, until JetStream refuses more: the node's
// publisher then pauses at its next publish.
func fillMemory(t testing.TB, n *orisun.Node) {
	t.Helper()
	ctx := context.Background()
	js := jsOf(t, n)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 8<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler", chunk); err != nil {
			t.Logf("JetStream's memory is full after %d messages of %d bytes: %v", i, len(chunk), err)
			return
		}
		if i > 10000 {
			t.Fatal("JetStream took 80 MB in a 1 MB server")
		}
	}
}

// jsOf connects a JetStream client to the node's NATS server, as an
// application: over TCP, without credentials.
func jsOf(t testing.TB, n *orisun.Node) jetstream.JetStream {
	t.Helper()
	nc := connect(t, n)
	js := natstest.JetStream(t, nc)
	return js
}

// TestStatusStalledStoreUnreachable_I7: the store stops answering: the
// status says so (store down, the publisher stalled with the store's error,
// /readyz 503 once the stall outlasts the threshold, settled false), and
// when the store is back the publisher leads again with the reason cleared.
func TestStatusStalledStoreUnreachable_I7(t *testing.T) {
	srv := pgtest.StartServer(t)
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.Backend, c.PGURL = "postgres", srv.URL
		c.StallThreshold = 500 * time.Millisecond
		// Shorter than the outage: the lease runs out while the store is
		// down, and the node must still say stalled (nobody can lead), not
		// standby (which would mean another node leads).
		c.LeaseTTL = 2 * time.Second
	})
	ctx := context.Background()
	appendSettled(t, ctx, n, events(4, "before", 32), 30*time.Second)

	srv.Stop(t)
	s := waitState(t, n, "default", "stalled", 60*time.Second, nil)
	if s.Reason == "" || s.Error == "" {
		t.Fatalf("stalled without a reason or a measurement error: %+v", s)
	}
	// Past the lease's expiry the state stays stalled, since the stall's
	// start, and the reason tells of the lease.
	later := waitState(t, n, "default", "stalled", 60*time.Second, func(b orisun.BoundaryStatus) bool {
		return strings.Contains(b.Reason, "lease")
	})
	if !later.Since.Equal(s.Since) {
		t.Fatalf("the stall's start moved from %s to %s when the lease ran out", s.Since, later.Since)
	}
	t.Logf("stalled past the lease: %q", later.Reason)
	st := httpStatus(t, n)
	if js, err := json.MarshalIndent(st, "", "  "); err == nil {
		t.Logf("status with the store down:\n%s", js)
	}
	if st.Store.OK || st.Store.Error == "" || st.Settled {
		t.Fatalf("store down but the status says %+v", st)
	}
	body := waitReadyz(t, n, "/readyz to report the stall past the threshold", 30*time.Second, http.StatusServiceUnavailable, "stalled since")
	if !strings.Contains(body, "store failing") {
		t.Fatalf("/readyz with the store down and a stall past the threshold: %d %s", http.StatusServiceUnavailable, body)
	}
	_, m := httpGet(t, n, "/metrics")
	wantMetric(t, m, "orisun_store_up", `backend="postgres"`, 0)
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="stalled"`, 1)
	wantMetric(t, m, "orisun_boundary_measured", `boundary="default"`, 0)
	if _, ok := metric(m, "orisun_boundary_head_position", `boundary="default"`); ok {
		t.Fatal("/metrics reports a head it could not measure")
	}
	if code, _ := httpGet(t, n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz is about the process, not the store: %d", code)
	}

	srv.Start(t)
	if _, err := appendRetry(ctx, n, events(3, "after", 32)); err != nil {
		t.Fatal(err)
	}
	l := waitState(t, n, "default", "leading", 60*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 7 && b.Error == "" })
	if strings.Contains(l.Reason, "connect") || strings.Contains(l.Reason, "refused") {
		t.Fatalf("recovered, but the reason still tells of the outage: %q", l.Reason)
	}
	// A kind of store work that failed is healthy again once it went a
	// second without failing (storewatch.go): within a poll interval more.
	waitReadyz(t, n, "/readyz 200 after recovery", 5*time.Second, http.StatusOK)
	_, m = httpGet(t, n, "/metrics")
	wantMetric(t, m, "orisun_store_up", `backend="postgres"`, 1)
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="leading"`, 1)
	wantMetric(t, m, "orisun_publisher_state", `boundary="default",state="stalled"`, 0)
}

// appendRetry appends, retrying while the store's pool reconnects.
func appendRetry(ctx context.Context, n *orisun.Node, evs []orisun.Input) (orisun.AppendResult, error) {
	var err error
	for range 100 {
		var res orisun.AppendResult
		if res, err = n.Append(ctx, "default", evs, nil); err == nil {
			return res, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return orisun.AppendResult{}, err
}

// insertRaw commits an event behind the API's back, as a buggy or foreign
// writer could: the head row and the events table in one transaction.
func insertRaw(t testing.TB, url, boundary, typ, data string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pgtest.Connect(t, url).Exec(ctx, `WITH h AS (UPDATE orisun_boundaries SET head = head + 1 WHERE name = $1 RETURNING head)
		INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
		SELECT $1, h.head, gen_random_uuid(), $2, now(), '{}', $3::json FROM h`, boundary, typ, data); err != nil {
		t.Fatal(err)
	}
}

// TestStatusStalledOnUnpublishableRow_I4_I7: a row the publisher cannot
// publish (larger than the NATS max payload, inserted behind the API's back)
// stalls the boundary loudly at that position; nothing after it is skipped
// past it; once the row is repaired the publisher leads again.
func TestStatusStalledOnUnpublishableRow_I4_I7(t *testing.T) {
	url := pgtest.URL(t)
	logs := &logCounter{}
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.Backend, c.PGURL = "postgres", url
		c.NATSMaxPayload = 4096
		c.StallThreshold = 200 * time.Millisecond
	}, orisun.WithLogger(slog.New(logs)))
	ctx := context.Background()
	appendSettled(t, ctx, n, events(3, "ok", 32), 30*time.Second)
	insertRaw(t, url, "default", "raw.big", `{"p":"`+strings.Repeat("x", 8000)+`"}`)
	mustAppend(t, ctx, n, "default", events(2, "later", 32))
	s := waitState(t, n, "default", "stalled", 30*time.Second, nil)
	if !strings.Contains(s.Reason, "position 4") || !strings.Contains(s.Reason, "max payload") || s.Published != 3 || s.Head != 6 || s.LagEvents != 3 {
		t.Fatalf("stalled status (want the reason to name position 4, published 3 of 6): %+v", s)
	}
	t.Logf("stalled reason: %s", s.Reason)
	waitReadyz(t, n, "/readyz to report the stall past the threshold", 30*time.Second, http.StatusServiceUnavailable, "stalled since")
	if _, last := checkStream(t, n, "default"); last != 3 {
		t.Fatalf("the stream went past the unpublishable position: last %d", last)
	}
	if got := logs.count("publisher stalled"); got != 1 {
		t.Fatalf("\"publisher stalled\" logged %d times at info or above while retrying, want once", got)
	}
	// A single node with a NATS of its own keeps its lease however long the
	// stall: nobody else could feed its stream. (Checked once the stall is
	// older than the threshold plus a lease TTL: several renewals later.)
	for time.Since(s.Since) < 200*time.Millisecond+3*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	if st := boundaryStatus(t, n, "default"); st.LeaseTerm != s.LeaseTerm || st.State != "stalled" ||
		logs.count("stepped down: the leader work made no progress; lease released for another node") != 0 {
		t.Fatalf("a single node stepped down from a stalled boundary: term %d then %d, state %s", s.LeaseTerm, st.LeaseTerm, st.State)
	}

	if _, err := pgtest.Connect(t, url).Exec(ctx, `UPDATE orisun_events SET data = '{"p":"repaired"}' WHERE boundary = 'default' AND position = 4`); err != nil {
		t.Fatal(err)
	}
	l := waitState(t, n, "default", "leading", 30*time.Second, func(b orisun.BoundaryStatus) bool { return b.Published == 6 })
	if strings.Contains(l.Reason, "payload") {
		t.Fatalf("recovered, but the reason still tells of the stall: %q", l.Reason)
	}
	if code, body := httpGet(t, n, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d %s", code, body)
	}
}

// TestSettledNeverEarly_I7: appends go on in bursts (4 appenders, quiet
// spells between bursts) while /status is sampled; every sample that says
// settled must have published (and head) at least the store's head read
// just before the sample was requested, and every position acknowledged
// before it. Both kinds of samples must occur for the test to mean
// anything. On SQLite and on PostgreSQL (concurrent group commits).
func TestSettledNeverEarly_I7(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			n := setup(t, "", func(c *orisun.Config) {
				withHTTP(c)
				c.PollInterval = time.Second
				if backend == "postgres" {
					c.Backend, c.PGURL = "postgres", pgtest.URL(t)
				}
			})
			settledNeverEarly(t, n)
		})
	}
}

func settledNeverEarly(t *testing.T, n *orisun.Node) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked atomic.Uint64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				res, err := n.Append(ctx, "default", events(1+(i+w)%5, "burst", 64), nil)
				if err != nil {
					return
				}
				for {
					cur := acked.Load()
					if res.Last <= cur || acked.CompareAndSwap(cur, res.Last) {
						break
					}
				}
				// A quiet spell of 150 ms in every 400 lets the publisher
				// catch up, so that settled samples occur too.
				if ms := time.Now().UnixMilli() % 400; ms >= 250 {
					time.Sleep(time.Duration(400-ms) * time.Millisecond)
				}
			}
		}()
	}
	var settled, unsettled int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && (settled < 200 || unsettled < 200) {
		before := acked.Load()
		bs, err := n.Boundaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		headBefore := bs[0].Head
		st := httpStatus(t, n)
		b := boundaryOf(t, st, "default")
		if b.Published > b.Head {
			t.Fatalf("published %d past head %d", b.Published, b.Head)
		}
		if !st.Settled {
			unsettled++
			continue
		}
		settled++
		if b.Published < max(before, headBefore) || b.Head < max(before, headBefore) {
			t.Fatalf("I7: settled claimed with published %d, head %d, but the store's head was %d and position %d was acknowledged before the sample",
				b.Published, b.Head, headBefore, before)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%d settled samples, %d unsettled, %d events acknowledged", settled, unsettled, acked.Load())
	if settled == 0 || unsettled == 0 {
		t.Fatalf("the samples did not see both settled (%d) and unsettled (%d) states: the check proved nothing", settled, unsettled)
	}
}

// TestStatusMetricsMatchJSON_I7: every figure of /metrics is the JSON's, from
// the same kind of measurement.
func TestStatusMetricsMatchJSON_I7(t *testing.T) {
	n := setup(t, "", withHTTP)
	if _, err := n.Append(context.Background(), "default", events(11, "m", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	st := httpStatus(t, n)
	_, m := httpGet(t, n, "/metrics")
	b := boundaryOf(t, st, "default")
	wantMetric(t, m, "orisun_boundary_head_position", `boundary="default"`, float64(b.Head))
	wantMetric(t, m, "orisun_stream_messages", `boundary="default"`, float64(b.StreamMsgs))
	wantMetric(t, m, "orisun_stream_bytes", `boundary="default"`, float64(b.StreamBytes))
	wantMetric(t, m, "orisun_lease_term", `boundary="default"`, float64(b.LeaseTerm))
	wantMetric(t, m, "orisun_subscriptions", `boundary="default",phase="live"`, 0)
	wantMetric(t, m, "orisun_build_info", fmt.Sprintf(`node_id=%q,version=%q`, st.NodeID, st.Version), 1)
	for _, s := range status.States {
		if _, ok := metric(m, "orisun_publisher_state", fmt.Sprintf(`boundary="default",state=%q`, s)); !ok {
			t.Fatalf("no orisun_publisher_state sample for %s", s)
		}
	}
	if _, ok := metric(m, "go_goroutines", ""); !ok {
		t.Fatal("/metrics has no Go runtime metrics")
	}
}

// connect opens a NATS connection to the node's server, closed at the end.
func connect(t testing.TB, n *orisun.Node) *nats.Conn {
	t.Helper()
	nc := natstest.Connect(t, n.NATSURL())
	return nc
}

// logCounter is a slog handler that counts messages at info and above.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCounter) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

func (l *logCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

func boundaryStatus(t *testing.T, n *orisun.Node, boundary string) orisun.BoundaryStatus {
	t.Helper()
	st := testutil.Get(t, n.Status)
	for _, b := range st.Boundaries {
		if b.Name == boundary {
			return b
		}
	}
	t.Fatalf("no boundary %q in the status", boundary)
	return orisun.BoundaryStatus{}
}
