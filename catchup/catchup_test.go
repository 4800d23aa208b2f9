package catchup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/catchup"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// relay is a store and a NATS server whose stream the test feeds by hand,
// as the publisher would: sequence = position, orisun's headers.
type relay struct {
	t     *testing.T
	store *sqlite.Store
	port  int
	srv   *natsembed.Server
	js    jetstream.JetStream // orisun's own connection: it writes the stream
	epoch string
	// pageSize is the subscriptions' page of store reads and of live
	// pulls (0: catchup's default).
	pageSize int
}

func newRelay(t *testing.T) *relay {
	t.Helper()
	ctx := context.Background()
	store := storetest.SQLite(t, sqlite.Config{Dir: t.TempDir()})
	b, _, err := store.CreateBoundary(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, store: store, port: testutil.FreePort(t), epoch: b.Epoch}
	r.startNATS()
	t.Cleanup(func() { r.srv.Stop() })
	if _, err := r.js.CreateStream(ctx, stream.Config("default", r.epoch, stream.Limits{}, 1)); err != nil {
		t.Fatal(err)
	}
	return r
}

// startNATS starts a NATS server, on the same port each time, with a store
// directory of its own: a restarted server knows no stream.
func (r *relay) startNATS() {
	r.t.Helper()
	srv, err := natsembed.New(natsembed.Config{Host: "127.0.0.1", Port: r.port, StoreDir: r.t.TempDir()})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		r.t.Fatal(err)
	}
	nc := natstest.Orisun(r.t, srv, "test-publisher")
	r.srv = srv
	r.js, err = jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
}

// append commits n events and, when publish is set, publishes them.
func (r *relay) append(n int, publish bool) {
	r.t.Helper()
	ctx := context.Background()
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{Type: "thing.happened", Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	prepared, err := event.Prepare("default", in, event.Limits{})
	if err != nil {
		r.t.Fatal(err)
	}
	res, err := r.store.Append(ctx, "default", prepared, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if !publish {
		return
	}
	_, events, err := r.store.Read(ctx, "default", res.First-1, n, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for i := range events {
		msg, err := stream.Message(&events[i], false)
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := r.js.PublishMsg(ctx, msg); err != nil {
			r.t.Fatal(err)
		}
	}
}

// subscription runs catchup.Subscribe from position 0 as an application
// would: over TCP, without credentials, reconnecting for ever.
type subscription struct {
	mu        sync.Mutex
	positions []uint64
	done      chan error
	cancel    context.CancelFunc
	stopped   bool
}

func (r *relay) subscribe() *subscription {
	r.t.Helper()
	return r.subscribeWith(nil)
}

// subscribeWith is subscribe with a function the handler calls first.
func (r *relay) subscribeWith(before func(event.Event)) *subscription {
	r.t.Helper()
	return r.subscribeOpts(before, event.SubscribeOptions{}, nil)
}

// subscribeOpts is subscribeWith with the subscription's options and
// logger (nil: none).
func (r *relay) subscribeOpts(before func(event.Event), opts event.SubscribeOptions, log *slog.Logger) *subscription {
	r.t.Helper()
	nc, err := nats.Connect(r.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- catchup.Subscribe(ctx, catchup.Config{Store: r.store, JS: js, RetryInterval: 50 * time.Millisecond, PageSize: r.pageSize,
			Logger: log},
			"default", 0, func(_ context.Context, e event.Event) error {
				if before != nil {
					before(e)
				}
				s.mu.Lock()
				s.positions = append(s.positions, e.Position)
				s.mu.Unlock()
				return nil
			}, opts)
	}()
	r.t.Cleanup(func() { s.stop(r.t) })
	return s
}

func (s *subscription) delivered() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.positions...)
}

// waitFor waits until positions 1..n were delivered, once each, in order.
func (s *subscription) waitFor(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("positions 1..%d delivered", n), 20*time.Second, 20*time.Millisecond, func() bool {
		return len(s.delivered()) >= n
	})
	got := s.delivered()
	if len(got) != n {
		t.Fatalf("delivered %d events, want %d: %v", len(got), n, got)
	}
	for i, p := range got {
		if p != uint64(i+1) {
			t.Fatalf("delivery %d is position %d, want %d (a gap or a duplicate): %v", i, p, i+1, got)
		}
	}
}

// stop cancels the subscription and waits for Subscribe to return. It
// must: a subscription that outlives its context keeps its program from
// stopping.
func (s *subscription) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	select {
	case err := <-s.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not return within 5 s of its context's end")
	}
}

// The NATS server a live subscription reads restarts without the stream
// (as a node's embedded server does when it is killed and comes back as a
// standby). The subscription must serve what is committed from the store
// and end when told to. With jetstream's ordered consumer it did neither:
// the consumer's recreation retried for ever, deaf to the context, and the
// fault test S4 hung on it.
func TestLiveSurvivesServerRestartWithoutStream(t *testing.T) {
	r := newRelay(t)
	r.append(5, true)
	s := r.subscribe()
	s.waitFor(t, 5)
	r.append(5, true) // delivered live
	s.waitFor(t, 10)

	r.srv.Stop()
	r.startNATS()
	// Committed, never published: the restarted server has no stream.
	r.append(5, false)
	s.waitFor(t, 15)
	s.stop(t)
}

// Someone deletes the stream under a live subscription: the consumer is
// deleted with it. The subscription reads the store, and goes live again
// once the stream is back.
func TestLiveSurvivesStreamDeletion(t *testing.T) {
	r := newRelay(t)
	r.append(3, true)
	s := r.subscribe()
	s.waitFor(t, 3)

	ctx := context.Background()
	if err := r.js.DeleteStream(ctx, stream.Name("default")); err != nil {
		t.Fatal(err)
	}
	r.append(3, false)
	s.waitFor(t, 6)

	// The stream comes back from the store's head, as the publisher
	// recreates it, and the subscription follows it live.
	if _, err := r.js.CreateStream(ctx, stream.Config("default", r.epoch, stream.Limits{}, 7)); err != nil {
		t.Fatal(err)
	}
	r.append(3, true)
	s.waitFor(t, 9)
	s.stop(t)
}

// A subscription that ends deletes its live consumer: subscriptions that
// come and go leave no consumer behind on the stream.
func TestLiveConsumerDeletedWhenSubscriptionEnds(t *testing.T) {
	r := newRelay(t)
	r.append(2, true)
	st := natstest.Stream(t, r.js, stream.Name("default"))
	consumers := func() int {
		return natstest.Info(t, st).State.Consumers
	}
	s := r.subscribe()
	s.waitFor(t, 2)
	testutil.Eventually(t, "the live consumer", 10*time.Second, 20*time.Millisecond, func() bool { return consumers() == 1 })
	s.stop(t)
	if n := consumers(); n != 0 {
		t.Fatalf("the stream has %d consumer(s) after the subscription ended, want 0", n)
	}
}

// A live subscription whose handler is slow falls behind a stream that
// keeps only its last four messages: the positions evicted under it are
// read from the store, and the subscription goes live again where the
// stream still holds the next position: each position once and in order
// (I5, docs/design.md §7).
func TestSlowSubscriberCatchesUpFromStoreAfterEviction(t *testing.T) {
	r := newRelay(t)
	ctx := context.Background()
	if err := r.js.DeleteStream(ctx, stream.Name("default")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.js.CreateStream(ctx, stream.Config("default", r.epoch, stream.Limits{MaxMsgs: 4}, 1)); err != nil {
		t.Fatal(err)
	}
	// Pulls of two messages: the evicted positions are not all in the
	// client's buffer already.
	r.pageSize = 2
	r.append(1, true)
	gate := make(chan struct{})
	reasons := &reasonLog{}
	s := r.subscribeOpts(func(e event.Event) {
		if e.Position == 2 {
			<-gate
		}
	}, event.SubscribeOptions{OnFellBehind: reasons.add}, nil)
	s.waitFor(t, 1)
	r.append(10, true) // positions 2–11; the stream keeps 8–11
	info, err := r.js.Stream(ctx, stream.Name("default"))
	if err != nil {
		t.Fatal(err)
	}
	if first := info.CachedInfo().State.FirstSeq; first != 8 {
		t.Fatalf("the stream's first sequence is %d, want 8 (positions 1–7 evicted)", first)
	}
	close(gate)
	s.waitFor(t, 11)
	// The subscription was live when the stream evicted under it: it
	// met the gap there, rather than reading everything from the store.
	if !slices.ContainsFunc(reasons.all(), func(r string) bool { return strings.HasPrefix(r, "gap:") }) {
		t.Fatalf("the subscription fell behind for %q, want a gap of the live stream", reasons.all())
	}
	r.append(3, true) // delivered live
	s.waitFor(t, 14)
	s.stop(t)
}

// reasonLog records the reasons a subscription fell behind (OnFellBehind).
type reasonLog struct {
	mu      sync.Mutex
	reasons []string
}

func (l *reasonLog) add(_ uint64, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reasons = append(l.reasons, reason)
}

func (l *reasonLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reasons)
}

// count is how many reasons contain what.
func (l *reasonLog) count(what string) int {
	n := 0
	for _, r := range l.all() {
		if strings.Contains(r, what) {
			n++
		}
	}
	return n
}

// A subscription whose live consumer JetStream refuses (the stream's
// consumer slots taken) while appends go on reads the store and tries the
// consumer again after a growing pause, appends or not: each try costs a
// stream info and a consumer creation, and counts a fall-back. Before, any
// event the store delivered reset the pause, so with ~125 appends/s it
// tried 29 times in 3 s. Meanwhile the store is read every retry interval,
// so the events still arrive, and the warning names the cause.
func TestRefusedConsumerRetriedWithGrowingPause(t *testing.T) {
	r := newRelay(t)
	ctx := context.Background()
	if err := r.js.DeleteStream(ctx, stream.Name("default")); err != nil {
		t.Fatal(err)
	}
	cfg := stream.Config("default", r.epoch, stream.Limits{}, 1)
	cfg.MaxConsumers = 1
	if _, err := r.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Another's consumer takes the only slot.
	if _, err := r.js.CreateConsumer(ctx, stream.Name("default"), jetstream.ConsumerConfig{Durable: "hog"}); err != nil {
		t.Fatal(err)
	}
	r.append(1, true)
	reasons := &reasonLog{}
	logs := &syncBuffer{}
	var mu sync.Mutex
	appendedAt := map[uint64]time.Time{}
	var slowest time.Duration // from an append to the event's delivery
	s := r.subscribeOpts(func(e event.Event) {
		mu.Lock()
		defer mu.Unlock()
		if at, ok := appendedAt[e.Position]; ok {
			slowest = max(slowest, time.Since(at))
		}
	}, event.SubscribeOptions{OnFellBehind: reasons.add}, slog.New(slog.NewTextHandler(logs, nil)))
	s.waitFor(t, 1)

	const window = 3 * time.Second
	appended := 1
	for start := time.Now(); time.Since(start) < window; {
		mu.Lock()
		appended++
		appendedAt[uint64(appended)] = time.Now()
		mu.Unlock()
		r.append(1, true)
		time.Sleep(8 * time.Millisecond) // ~125 appends/s with the append's own time
	}
	refused := reasons.count("live consumer not created")
	// Pauses of 50 ms (the retry interval), 100, 200, … ms: about seven
	// tries in 3 s; a few more leave room for a loaded machine, and none
	// for a pause reset by every delivery.
	t.Logf("%d appends, %d refused consumer creations in %s", appended, refused, window)
	if refused == 0 {
		t.Fatalf("no refused consumer creation: the slot was not taken? reasons %q", reasons.all())
	}
	if refused > 10 {
		t.Fatalf("%d refused consumer creations in %s: the pause did not grow while the store delivered", refused, window)
	}
	// The store is read every retry interval (50 ms) meanwhile: the
	// events keep arriving, not one pause (up to 5 s) late.
	s.waitFor(t, appended)
	mu.Lock()
	worst := slowest
	mu.Unlock()
	t.Logf("slowest delivery after its append: %s", worst)
	if worst >= time.Second {
		t.Fatalf("an event reached the handler %s after its append: the store was not read during the pause", worst)
	}
	if out := logs.String(); strings.Count(out, "no consumer slot") != 1 || !strings.Contains(out, "level=WARN") {
		t.Fatalf("the log does not name the full consumer table once as a warning:\n%s", out)
	}
	s.stop(t)
}

// syncBuffer is a log destination tests read while the subscription
// writes.
type syncBuffer = testutil.LogBuffer

// A subscription that resumes in an epoch the boundary no longer has (it
// was reset or restored) ends with event.ErrEpochChanged instead of
// delivering positions that mean something else now.
func TestSubscribeInAnotherEpochEnds(t *testing.T) {
	r := newRelay(t)
	r.append(3, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	delivered := 0
	err := catchup.Subscribe(ctx, catchup.Config{Store: r.store, JS: r.js, RetryInterval: 50 * time.Millisecond},
		"default", 1, func(context.Context, event.Event) error {
			delivered++
			return nil
		}, event.SubscribeOptions{Epoch: "0190b0a0-0000-7000-8000-000000000001"})
	if !errors.Is(err, event.ErrEpochChanged) {
		t.Fatalf("Subscribe in another epoch returned %v, want event.ErrEpochChanged", err)
	}
	if delivered != 0 {
		t.Fatalf("%d events delivered in another epoch, want none", delivered)
	}
}
