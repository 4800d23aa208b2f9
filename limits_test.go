package orisun_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// limitsModes are the two configurations of the hostile tests of this
// file: the default (no credentials; every client is the application and,
// with no admin either, may create boundaries), and credentials for the
// applications and an admin. app are the applications' login, admin the
// admin's.
var limitsModes = []struct {
	name       string
	cfg        func(*orisun.Config)
	app, admin []nats.Option
}{
	{name: "default configuration", cfg: func(*orisun.Config) {}},
	{
		name: "credentials",
		cfg: func(c *orisun.Config) {
			c.NATSUser, c.NATSPassword = "app", "app-password-1"
			c.NATSAdminUser, c.NATSAdminPassword = "admin", "admin-password-1"
		},
		app:   []nats.Option{nats.UserInfo("app", "app-password-1")},
		admin: []nats.Option{nats.UserInfo("admin", "admin-password-1")},
	},
}

// failingSave fails the next checkpoint write when armed, and every one
// while all is set: the publisher then syncs again, and must verify what
// the stream holds beyond the checkpoint before it resumes.
type failingSave struct {
	backend.Store
	armed, all atomic.Bool
}

func (f *failingSave) SaveCheckpoint(ctx context.Context, b string, l backend.Lease, pos uint64) error {
	if f.all.Load() || f.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("checkpoint write failed on purpose: %w", event.ErrUnavailable)
	}
	return f.Store.SaveCheckpoint(ctx, b, l, pos)
}

// TestConsumerExhaustion_S13_I4_I5: one application takes every consumer
// slot of a boundary's stream (JetStream's per-stream limit, 1,000 by
// default), with durable consumers it then abandons. On the default
// configuration and with credentials:
//   - a consumer may not ask to outlive stream.ConsumerInactiveMax unused,
//     and a durable one that does not ask gets it: abandoned consumers free
//     their slots (docs/security.md, "Limits");
//   - orisun keeps relaying (I4): new appends reach the stream, also through
//     a sync that must verify the stream beyond the checkpoint (a failed
//     checkpoint write forces one), which reads message by message when
//     JetStream refuses it a consumer;
//   - the Go client of a second application delivers exactly the store's
//     events (I5), from the store, each fall-back counted and its reason
//     naming the refused consumer, and says so in its log; so does the
//     node's own subscription (Node.Subscribe), counted in the status;
//   - the second application reads: the API's read and JetStream's message
//     get need no consumer slot.
func TestConsumerExhaustion_S13_I4_I5(t *testing.T) {
	for _, mode := range limitsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			fs := &failingSave{}
			n := setup(t, "", mode.cfg, testhooks.Option[orisun.Option](testhooks.Hooks{
				WrapStore: func(s backend.Store) backend.Store { fs.Store = s; return fs },
			}))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			appendSettled(t, ctx, n, events(5, "before", 32), 30*time.Second)

			// The hog: an application taking every consumer slot.
			hog, err := jetstream.New(dialApp(t, n, mode.app))
			if err != nil {
				t.Fatal(err)
			}
			name := stream.Name("default")
			if _, err := hog.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "forever", InactiveThreshold: 2 * stream.ConsumerInactiveMax}); err == nil ||
				!strings.Contains(err.Error(), "inactive threshold") {
				t.Fatalf("a consumer asking to outlive %s unused: %v, want refused", stream.ConsumerInactiveMax, err)
			}
			hogs := 0
			for ; ; hogs++ {
				c, err := hog.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: fmt.Sprintf("hog%d", hogs)})
				if errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
					break
				}
				if err != nil {
					t.Fatalf("consumer %d: %v", hogs, err)
				}
				if got := c.CachedInfo().Config.InactiveThreshold; got != stream.ConsumerInactiveMax {
					t.Fatalf("a durable consumer without an inactive threshold got %s, want %s", got, stream.ConsumerInactiveMax)
				}
				if hogs > 100_000 {
					t.Fatal("JetStream set no limit on the stream's consumers")
				}
			}
			t.Logf("the hog holds %d consumers; JetStream refuses more", hogs)

			// The second application: a Go client subscription and reads.
			logs := &syncBuffer{}
			c, err := client.Connect(n.NATSURL(), client.NATSOptions(mode.app...),
				client.Logger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var mu sync.Mutex
			var refused, fallBacks int
			rec := newRecorder(0)
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- c.Subscribe(sctx, "default", 0, rec.handle, client.SubscribeOptions{OnFellBehind: func(_ uint64, reason string) {
					mu.Lock()
					defer mu.Unlock()
					fallBacks++
					if strings.Contains(reason, "maximum consumers limit reached") {
						refused++
					}
				}})
			}()
			waitDelivered(t, rec, 5, 30*time.Second)
			// The client tries the stream only while the node's status says
			// the boundary is leading, and the store alone can deliver every
			// event: wait for the refusal itself before the forced sync
			// below takes the boundary out of leading for a while.
			testutil.Eventually(t, "the client's subscription to be refused a consumer", 30*time.Second, 20*time.Millisecond, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return refused > 0
			})
			// And the node's own subscription (Node.Subscribe).
			own := newRecorder(0)
			var ownRefused atomic.Int64
			stopOwn := subscribe(t, n, "default", 0, own, orisun.SubscribeOptions{OnFellBehind: func(_ uint64, reason string) {
				if strings.Contains(reason, "maximum consumers limit reached") {
					ownRefused.Add(1)
				}
			}})
			testutil.Eventually(t, "the node's subscription to be refused a consumer, counted in the status", 30*time.Second, 20*time.Millisecond, func() bool {
				st, err := n.Status(ctx)
				return ownRefused.Load() > 0 && err == nil && st.Boundaries[0].SubsFallBacks > 0
			})

			// orisun relays, also through a sync that verifies the stream.
			fs.armed.Store(true)
			appendSettled(t, ctx, n, events(20, "during", 32), 30*time.Second)
			if fs.armed.Load() {
				t.Fatal("no checkpoint write was attempted: the forced sync did not happen")
			}
			st := appendSettled(t, ctx, n, events(5, "after", 32), 30*time.Second)
			if st.Boundaries[0].Published != 30 {
				t.Fatalf("published %d, want 30", st.Boundaries[0].Published)
			}

			waitDelivered(t, rec, 30, 60*time.Second)
			waitDelivered(t, own, 30, 60*time.Second)
			if err := stopOwn(); err != nil {
				t.Fatalf("the node's subscription: %v", err)
			}
			checkAgainstStore(t, n, "default", 0, own)
			if st, err := n.Status(ctx); err == nil {
				t.Logf("the node's status counts %d fall-backs", st.Boundaries[0].SubsFallBacks)
			}
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("subscription: %v", err)
			}
			checkAgainstStore(t, n, "default", 0, rec)
			mu.Lock()
			t.Logf("the subscription fell back to the store %d times, %d of them for a refused consumer", fallBacks, refused)
			mu.Unlock()
			if !strings.Contains(logs.String(), "has no consumer slot free for the subscription") {
				t.Fatalf("the client's log does not say the consumer was refused:\n%s", logs.String())
			}

			res, err := c.Read(ctx, "default", 0, 100, nil)
			if err != nil || len(res.Events) != 30 {
				t.Fatalf("the second application's read: %d events, %v", len(res.Events), err)
			}
			s, err := c.Conn().JetStream()
			if err != nil {
				t.Fatal(err)
			}
			// Both subscriptions read the store: the stream itself, after
			// the forced sync, is checked here, message by message (a get
			// needs no consumer slot).
			for seq := uint64(1); seq <= 30; seq++ {
				m, err := s.GetMsg(name, seq)
				if err != nil {
					t.Fatalf("the second application's message get of sequence %d: %v", seq, err)
				}
				if m.Header.Get(stream.HeaderEventID) != res.Events[seq-1].ID || m.Header.Get(stream.HeaderPosition) != strconv.FormatUint(seq, 10) {
					t.Fatalf("stream sequence %d holds event %s at position %s, the store event %s", seq,
						m.Header.Get(stream.HeaderEventID), m.Header.Get(stream.HeaderPosition), res.Events[seq-1].ID)
				}
			}
		})
	}
}

// dialApp connects to the node's NATS server as an application, with
// creds (nil: none), and fails the test if it cannot.
func dialApp(t *testing.T, n *orisun.Node, creds []nats.Option) *nats.Conn {
	t.Helper()
	nc := natstest.Connect(t, n.NATSURL(), creds...)
	return nc
}

// TestBoundaryMemoryBudget_S13: every boundary's stream reserves
// ORISUN_NATS_EVENT_STREAM_MAX_BYTES of JetStream's memory budget
// (ORISUN_NATS_MAX_MEMORY). A boundary whose stream would not fit is
// refused when it is created, too_large, with an error naming the budget,
// what is reserved and the variables to change, instead of being accepted
// and left paused: through the API, Node.CreateBoundary and
// ORISUN_BOUNDARIES at start. Boundaries already accepted keep their
// memory: the streams of those accepted and not yet created count as
// reserved. With credentials the application may not create boundaries
// at all (a permissions violation); the admin may, within the budget.
func TestBoundaryMemoryBudget_S13(t *testing.T) {
	const perStream, budget = 4 << 20, 10 << 20 // room for two streams
	for _, mode := range limitsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			n := setup(t, dir, func(c *orisun.Config) {
				mode.cfg(c)
				c.EventStreamMaxBytes, c.NATSMaxMemory = perStream, budget
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			waitSettled(t, n, 30*time.Second)

			creator := mode.admin
			if mode.app != nil {
				// The application may not create boundaries.
				errOpt, vio := natstest.Violations()
				nc := natstest.Connect(t, n.NATSURL(), append(mode.app, errOpt)...)
				app := natstest.Client(t, n.NATSURL(), client.NATSOptions(mode.app...), client.Timeout(2*time.Second))
				if err := nc.Publish("orisun.api.boundaries.create", []byte(`{"name":"sneaky"}`)); err != nil {
					t.Fatal(err)
				}
				waitForViolation(t, vio, "Publish", "orisun.api.boundaries.create")
				if _, err := app.CreateBoundary(context.Background(), "sneaky"); err == nil {
					t.Fatal("the application created a boundary")
				}
				if _, err := n.Boundary(ctx, "sneaky"); !errors.Is(err, event.ErrNotFound) {
					t.Fatalf("boundary sneaky after the application's attempts: %v, want not found", err)
				}
			}
			c := natstest.Client(t, n.NATSURL(), client.NATSOptions(creator...))
			if _, err := c.CreateBoundary(ctx, "second"); err != nil {
				t.Fatalf("the second stream fits: %v", err)
			}
			// The third does not: "second"'s stream may not exist yet,
			// its memory counts all the same.
			_, err := c.CreateBoundary(ctx, "third")
			checkBudgetError(t, err, "third", budget, perStream)
			if !errors.Is(err, event.ErrTooLarge) {
				t.Fatalf("refused with %v, want too_large", err)
			}
			_, err = n.CreateBoundary(ctx, "fourth")
			checkBudgetError(t, err, "fourth", budget, perStream)
			for _, b := range []string{"third", "fourth"} {
				if _, err := n.Boundary(ctx, b); !errors.Is(err, event.ErrNotFound) {
					t.Fatalf("boundary %s after the refusal: %v, want not found", b, err)
				}
			}
			// An existing boundary is returned, not refused.
			if b, err := c.CreateBoundary(ctx, "second"); err != nil || b.Name != "second" {
				t.Fatalf("creating an existing boundary again: %+v %v", b, err)
			}
			// The accepted boundaries got their streams: leading, not
			// paused.
			var st orisun.Status
			testutil.Eventually(t, "default and second leading", 30*time.Second, 20*time.Millisecond, func() bool {
				st, err = n.Status(ctx)
				leading := 0
				for _, b := range st.Boundaries {
					if b.State == "leading" {
						leading++
					}
				}
				return err == nil && leading == 2 && len(st.Boundaries) == 2
			})
			for _, b := range []string{"default", "second"} {
				if _, err := attacker(t, n).Stream(ctx, stream.Name(b)); err != nil {
					t.Fatalf("the stream of %s: %v", b, err)
				}
			}
			if err := n.Stop(); err != nil {
				t.Fatal(err)
			}

			// At start: the configured boundaries that are new must fit.
			bad, err := orisun.New(orisun.Config{DataDir: dir, NATSPort: -1, Boundaries: []string{"default", "second", "third"},
				EventStreamMaxBytes: perStream, NATSMaxMemory: budget})
			if err != nil {
				t.Fatal(err)
			}
			err = bad.Start(ctx)
			checkBudgetError(t, err, "third", budget, perStream)
			if !strings.Contains(err.Error(), "ORISUN_BOUNDARIES") {
				t.Fatalf("the start's error does not name ORISUN_BOUNDARIES: %v", err)
			}
		})
	}
}

// TestBoundaryMemoryBudgetEmbeddedCluster_S13: in an embedded cluster whose
// streams have a replica on every server (three nodes, three replicas, as
// docker-compose.yml runs it) every server holds every stream, so the
// memory check runs there as on a single server: a boundary whose stream
// would not fit a node's budget is refused at creation, through the API
// and Node.CreateBoundary on any node, instead of accepted with streams
// that fill every node. Before, a cluster was never checked.
func TestBoundaryMemoryBudgetEmbeddedCluster_S13(t *testing.T) {
	const perStream, budget = 4 << 20, 10 << 20 // room for two streams
	url := pgtest.URL(t)
	ports, routes := clusterPorts(t, 3)
	var nodes []*orisun.Node
	for i, p := range ports {
		nodes = append(nodes, clusterNode(t, url, fmt.Sprintf("node-%d", i+1), p, routes, func(c *orisun.Config) {
			c.EventStreamMaxBytes, c.NATSMaxMemory = perStream, budget
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leaderOf(t, nodes, "default", 60*time.Second)
	if _, err := nodes[0].CreateBoundary(ctx, "second"); err != nil {
		t.Fatalf("the second stream fits: %v", err)
	}
	// Its stream on every server before the next creation, wherever that
	// is checked: a boundary another node created is counted once the
	// node adopts it or its stream exists.
	leaderOf(t, nodes, "second", 60*time.Second)
	c := natstest.Client(t, nodes[1].NATSURL())
	_, err := c.CreateBoundary(ctx, "third")
	checkBudgetError(t, err, "third", budget, perStream)
	_, err = nodes[2].CreateBoundary(ctx, "fourth")
	checkBudgetError(t, err, "fourth", budget, perStream)
	for _, b := range []string{"third", "fourth"} {
		if _, err := nodes[0].Boundary(ctx, b); !errors.Is(err, event.ErrNotFound) {
			t.Fatalf("boundary %s after the refusal: %v, want not found", b, err)
		}
	}
}

// TestJetStreamReplyCannotCreateBoundary_S13: NATS does not check the
// reply subject a client names (docs/security.md, "A known gap"), so an
// application that may not create boundaries (credentials configured, the
// creation the admin's) can have JetStream answer a request of its own on
// orisun.api.boundaries.create. A consumer creation's answer carries a
// top-level "name" the application chooses. The API must not take it for
// a creation: it refuses a body with any key but the request's own
// (DisallowUnknownFields), and every JetStream answer has others ("type",
// "stream_name", "config", …). The control: the consumer exists (the
// request ran) and the create endpoint counted one more request (the
// answer reached the API).
func TestJetStreamReplyCannotCreateBoundary_S13(t *testing.T) {
	mode := limitsModes[1]
	n := setup(t, "", mode.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := stream.Name("default")
	js := attacker(t, n)
	testutil.Eventually(t, "the stream", 30*time.Second, 20*time.Millisecond, func() bool {
		_, err := js.Stream(ctx, name)
		return err == nil
	})
	app := dialApp(t, n, mode.app)
	requests := func() int {
		m, err := app.RequestWithContext(ctx, "$SRV.STATS."+api.ServiceName, nil)
		if err != nil {
			t.Fatalf("service stats: %v", err)
		}
		var stats micro.Stats
		if err := json.Unmarshal(m.Data, &stats); err != nil {
			t.Fatal(err)
		}
		for _, e := range stats.Endpoints {
			if e.Subject == api.SubjectCreateBoundary {
				return e.NumRequests
			}
		}
		t.Fatalf("no endpoint %s in the service's stats: %s", api.SubjectCreateBoundary, m.Data)
		return 0
	}
	before := requests()
	body := fmt.Sprintf(`{"stream_name":%q,"config":{"name":"evil","durable_name":"evil","ack_policy":"none","deliver_policy":"all"}}`, name)
	if err := app.PublishRequest("$JS.API.CONSUMER.CREATE."+name+".evil", api.SubjectCreateBoundary, []byte(body)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the consumer evil, and its answer at the create endpoint", 10*time.Second, 20*time.Millisecond, func() bool {
		_, err := js.Consumer(ctx, name, "evil")
		return err == nil && requests() > before
	})
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if b, err := n.Boundary(ctx, "evil"); !errors.Is(err, event.ErrNotFound) {
			t.Fatalf("JetStream's answer created boundary %+v (%v)", b, err)
		}
	}
}

// checkBudgetError asserts that err refuses boundary b for the memory
// budget and names it, what is reserved, and what to change.
func checkBudgetError(t *testing.T, err error, b string, budget, perStream int64) {
	t.Helper()
	if err == nil {
		t.Fatalf("boundary %s was accepted beyond the memory budget", b)
	}
	for _, want := range []string{
		fmt.Sprintf("boundary %q refused", b),
		fmt.Sprintf("would reserve %d MiB (%d bytes)", perStream>>20, perStream),
		fmt.Sprintf("budget of %d MiB (%d bytes) (ORISUN_NATS_MAX_MEMORY)", budget>>20, budget),
		"existing streams and",
		"ORISUN_NATS_EVENT_STREAM_MAX_BYTES",
		"lower ORISUN_NATS_EVENT_STREAM_MAX_BYTES to at most ",
		"or raise ORISUN_NATS_MAX_MEMORY to at least ",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal of %s does not say %q: %v", b, want, err)
		}
	}
	t.Logf("refused: %v", err)
}
