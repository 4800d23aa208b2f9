package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// startRelay runs the orisun binary on dir and port, and waits until it
// logs that it started. The port is the caller's: the relay is restarted
// on the same port, so it cannot be random per start.
func startRelay(t *testing.T, dir string, port int, env ...string) *testutil.Process {
	t.Helper()
	r := testutil.StartNode(t, "relay", append([]string{"ORISUN_DATA_DIR=" + dir, fmt.Sprintf("ORISUN_NATS_PORT=%d", port),
		"ORISUN_POLL_INTERVAL=20ms", "ORISUN_PUBLISH_BATCH=50"}, env...)...)
	r.WaitLine(t, "orisun started", 60*time.Second)
	return r
}

// recorder checks I5 as events arrive: each position is the one after the
// last, exactly once.
type recorder struct {
	mu   sync.Mutex
	next uint64
	ids  map[uint64]string
	err  error
	got  chan struct{}
}

func newRecorder(after uint64) *recorder {
	return &recorder{next: after + 1, ids: map[uint64]string{}, got: make(chan struct{}, 1)}
}

func (r *recorder) handle(_ context.Context, e event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Position != r.next && r.err == nil {
		r.err = fmt.Errorf("delivered position %d, expected %d (I5)", e.Position, r.next)
	}
	if _, dup := r.ids[e.Position]; dup && r.err == nil {
		r.err = fmt.Errorf("position %d delivered twice (I5)", e.Position)
	}
	r.ids[e.Position] = e.ID
	r.next = e.Position + 1
	select {
	case r.got <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) delivered() (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next - 1, r.err
}

func (r *recorder) waitFor(t *testing.T, pos uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		d, err := r.delivered()
		if err != nil {
			t.Fatal(err)
		}
		if d >= pos {
			return
		}
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("delivered up to %d, want %d within %s", d, pos, timeout)
		}
	}
}

func batch(n int, typ string) []event.Input {
	evs := make([]event.Input, n)
	for i := range evs {
		// Ids chosen here make a retry after a lost reply idempotent.
		evs[i] = event.Input{ID: event.NewID(), Type: typ, Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Tags: []string{"t"}}
	}
	return evs
}

// TestClientAgainstRelayProcess_I5: the Go client against a real orisun
// process on SQLite: append, read, a subscription from 0 through the
// catch-up-to-live handover while appends continue, then the relay is
// killed with SIGKILL and started again on the same directory and port. The
// subscription resumes by itself and every position is delivered exactly
// once, in order (I5); appends retried with the same ids across the kill
// are idempotent.
func TestClientAgainstRelayProcess_I5(t *testing.T) {
	t.Parallel()
	testClientAgainstRelay(t)
}

// TestClientAgainstRelayProcessPostgres_I5 is the same on PostgreSQL: the
// killed relay's lease expires (a short TTL) and the restarted one takes
// it over.
func TestClientAgainstRelayProcessPostgres_I5(t *testing.T) {
	t.Parallel()
	testClientAgainstRelay(t, "ORISUN_BACKEND=postgres", "ORISUN_PG_URL="+pgtest.URL(t), "ORISUN_LEASE_TTL=1s")
}

func testClientAgainstRelay(t *testing.T, env ...string) {
	dir := t.TempDir()
	port := testutil.FreePort(t)
	r := startRelay(t, dir, port, env...)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	c := natstest.Client(t, url, client.Name("client-test"), client.Timeout(5*time.Second))
	ctx := context.Background()

	res, err := c.Append(ctx, "default", batch(500, "client.test"), nil)
	if err != nil || res.First != 1 || res.Last != 500 {
		t.Fatalf("append: %+v %v", res, err)
	}
	rd, err := c.Read(ctx, "default", 0, 10, nil)
	if err != nil || len(rd.Events) != 10 || rd.Head != 500 || rd.Epoch != res.Epoch {
		t.Fatalf("read: %d events, head %d, %v", len(rd.Events), rd.Head, err)
	}
	if _, err := c.Read(ctx, "default", 0, 20000, nil); !errors.Is(err, event.ErrInvalid) ||
		!strings.Contains(err.Error(), "limit: 20000 is above the maximum 10000") {
		t.Fatalf("read with limit 20000: %v", err)
	}
	if _, err := c.Append(ctx, "nosuch", batch(1, "a"), nil); !errors.Is(err, event.ErrNotFound) {
		t.Fatalf("append to an unknown boundary: %v", err)
	}

	// Appends continue in the background, each batch retried with its ids
	// until it is acknowledged, whatever happens to the relay.
	appendCtx, stopAppends := context.WithCancel(ctx)
	var appended sync.WaitGroup
	var lastMu sync.Mutex
	var last uint64
	appended.Add(1)
	go func() {
		defer appended.Done()
		for appendCtx.Err() == nil {
			evs := batch(20, "client.live")
			for {
				res, err := c.Append(ctx, "default", evs, nil)
				if err == nil {
					lastMu.Lock()
					last = max(last, res.Last)
					lastMu.Unlock()
					break
				}
				if !errors.Is(err, event.ErrUnavailable) {
					t.Errorf("append: %v", err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	rec := newRecorder(0)
	var caughtUp, fellBehind sync.Map
	subCtx, cancelSub := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() {
		subDone <- c.Subscribe(subCtx, "default", 0, rec.handle, client.SubscribeOptions{
			OnCaughtUp:   func(next uint64) { caughtUp.Store(next, true) },
			OnFellBehind: func(next uint64, reason string) { fellBehind.Store(next, reason) },
		})
	}()
	// Through the handover: deliveries continue after the subscription
	// went live.
	rec.waitFor(t, 1000, 60*time.Second)
	waitCaughtUp(t, &caughtUp, 60*time.Second)
	d, _ := rec.delivered()
	rec.waitFor(t, d+100, 60*time.Second)

	r.Kill(t)
	killedAt, _ := rec.delivered()
	t.Logf("relay killed; subscription at %d", killedAt)
	startRelay(t, dir, port, env...)
	rec.waitFor(t, killedAt+300, 120*time.Second)

	stopAppends()
	appended.Wait()
	lastMu.Lock()
	final := last
	lastMu.Unlock()
	bs, err := c.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].Head < final {
		t.Fatalf("head %d below the last acknowledged position %d: an acknowledged append was lost", bs[0].Head, final)
	}
	rec.waitFor(t, bs[0].Head, 120*time.Second)
	cancelSub()
	if err := <-subDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("subscription ended with %v", err)
	}
	// Every position once, in order, and the same event as the store holds.
	checkAgainstStore(t, c, rec, bs[0].Head)
	n := 0
	fellBehind.Range(func(k, v any) bool { n++; t.Logf("fell behind at %v: %v", k, v); return true })
	if n == 0 {
		t.Log("the subscription never fell behind (the restart was covered by the live consumer)")
	}
}

func waitCaughtUp(t *testing.T, m *sync.Map, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, "the subscription to go live", timeout, 10*time.Millisecond, func() bool {
		found := false
		m.Range(func(any, any) bool { found = true; return false })
		return found
	})
}

func checkAgainstStore(t *testing.T, c *client.Client, rec *recorder, head uint64) {
	t.Helper()
	d, err := rec.delivered()
	if err != nil {
		t.Fatal(err)
	}
	if d != head {
		t.Fatalf("delivered up to %d, head %d", d, head)
	}
	var after uint64
	for after < head {
		rd, err := c.Read(context.Background(), "default", after, 10000, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rd.Events {
			rec.mu.Lock()
			id := rec.ids[e.Position]
			rec.mu.Unlock()
			if id != e.ID {
				t.Fatalf("position %d: delivered id %q, stored %q", e.Position, id, e.ID)
			}
			after = e.Position
		}
	}
	if len(rec.ids) != int(head) {
		t.Fatalf("%d positions delivered, head %d", len(rec.ids), head)
	}
}

// TestSubscriptionReadsStoreWhilePublisherStalled_I5: someone takes the
// boundary's subjects for a stream of their own while a subscription over
// NATS is live, so the publisher stalls. The subscription must not stop: it
// goes back to the store through the API, and keeps delivering every
// position once, in order, while the publisher cannot publish.
func TestSubscriptionReadsStoreWhilePublisherStalled_I5(t *testing.T) {
	t.Parallel()
	// A poll interval long enough that the drift check does not put the
	// subjects back between the intruder's two steps below.
	n, c := startNodeAndClient(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: time.Second})
	ctx := context.Background()
	if _, err := c.Append(ctx, "default", batch(50, "a"), nil); err != nil {
		t.Fatal(err)
	}
	// The stream holds 1..50 before the subscription starts, so that it
	// goes live on a fed stream.
	testutil.Until(t, "the stream to hold 1..50", 30*time.Second, 20*time.Millisecond, func() error {
		st := testutil.Get(t, c.Status)
		if st.Settled && st.Boundaries[0].StreamLast == 50 {
			return nil
		}
		return fmt.Errorf("not published: %+v", st)
	})
	rec := newRecorder(0)
	live := make(chan struct{}, 10)
	subCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(subCtx, "default", 0, rec.handle, client.SubscribeOptions{
			OnFellBehind: func(next uint64, reason string) { t.Logf("fell behind at %d: %s", next, reason) },
			OnCaughtUp: func(uint64) {
				select {
				case live <- struct{}{}:
				default:
				}
			},
		})
	}()
	rec.waitFor(t, 50, 30*time.Second)
	select {
	case <-live:
	case <-time.After(30 * time.Second):
		t.Fatal("never went live")
	}
	// The intruder writes as orisun's own connection: an application's
	// publish there is refused (docs/design.md §12).
	intruder := natstest.NodeConn(t, n, "intruder")
	// A foreign message alone no longer stalls the publisher (the drift
	// check removes it within a poll interval): the intruder takes the
	// boundary's subjects for a stream of its own, which orisun's cannot
	// take back while it exists.
	ijs := natstest.JetStream(t, intruder)
	s := natstest.Stream(t, ijs, stream.Name("default"))
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{"orisun.attack.default.>"}
	if _, err := ijs.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{stream.Subjects("default")},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, "default", batch(50, "a"), nil); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "the publisher to stall", 30*time.Second, 20*time.Millisecond, func() error {
		st := testutil.Get(t, c.Status)
		if st.Boundaries[0].State == "stalled" {
			t.Logf("publisher: %s", st.Boundaries[0].Reason)
			return nil
		}
		return fmt.Errorf("publisher not stalled: %+v", st.Boundaries[0])
	})
	rec.waitFor(t, 100, 30*time.Second)
	// The stream is fed no more; these come from the store only.
	if _, err := c.Append(ctx, "default", batch(50, "a"), nil); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 150, 30*time.Second)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	checkAgainstStore(t, c, rec, 150)
}

// TestSubscribeEndsWhenClientClosed: closing the client ends a live
// subscription with event.ErrClosed (it looks every 200 ms) instead of
// leaving it to retry forever.
func TestSubscribeEndsWhenClientClosed(t *testing.T) {
	t.Parallel()
	c := startNode(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1})
	ctx := context.Background()
	if _, err := c.Append(ctx, "default", batch(3, "a"), nil); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(0)
	done := make(chan error, 1)
	go func() { done <- c.Subscribe(ctx, "default", 0, rec.handle, client.SubscribeOptions{}) }()
	rec.waitFor(t, 3, 30*time.Second)
	c.Close()
	var err error
	testutil.Eventually(t, "the subscription to end after its client closed", 30*time.Second, 10*time.Millisecond, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, event.ErrClosed) {
		t.Fatalf("the subscription ended with %v, want event.ErrClosed", err)
	}
}

// startNode starts a node in this process with cfg and connects a client
// to it; both end with the test.
func startNode(t *testing.T, cfg orisun.Config) *client.Client {
	t.Helper()
	_, c := startNodeAndClient(t, cfg)
	return c
}

// startNodeAndClient is startNode that also returns the node.
func startNodeAndClient(t *testing.T, cfg orisun.Config) (*orisun.Node, *client.Client) {
	t.Helper()
	n, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := natstest.Client(t, n.NATSURL())
	return n, c
}
