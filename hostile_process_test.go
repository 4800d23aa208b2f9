package orisun_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// hostileStreamBytes and hostileBudget are the stream size and JetStream
// memory budget of TestHostileClientsAgainstAProcess_S13: room for two
// boundaries' streams, so that a third is beyond the budget.
const hostileStreamBytes, hostileBudget = 8 << 20, 20 << 20

// TestHostileClientsAgainstAProcess_S13 runs the attacks of issue 16
// against a real orisun process (the built binary, `orisun serve`, with its
// embedded NATS), twice: on the default configuration (no credentials; the
// attacker connects without any) and with credentials for the applications
// and an admin (the attacker is an application). Only the memory budget is
// set, small, so that a few boundaries fill it. While a Go client
// subscription (client.Subscribe) and a steady appender run, the attacker,
// a plain NATS client over TCP:
//   - publishes a forged event at the next position with orisun's headers
//     and the real epoch: a permissions violation;
//   - joins the API's queue group on orisun.api.append.*: a permissions
//     violation, and it answers no append;
//   - updates the stream's subjects and its max_msgs, purges it, deletes a
//     message, deletes the stream: each a permissions violation, and the
//     stream keeps orisun's configuration and every message;
//   - creates 1,000 durable consumers on the stream, concurrently, until
//     JetStream refuses more: orisun keeps relaying, a second application's
//     subscription started then delivers (from the store, each fall-back
//     counted) and it reads through the API and by message get;
//   - creates boundaries: on the default configuration the one beyond the
//     budget is refused with the budget's error; with credentials the
//     application may not create any (a permissions violation), and the
//     admin's one beyond the budget is refused the same way;
//   - sends an append whose "condition" is given twice: invalid, naming the
//     key, nothing appended.
//
// Afterwards the status settles with no warning, every boundary leading;
// every acknowledged append is in the store once, at its position, and the
// store holds nothing else (I1); both subscriptions delivered exactly the
// store's events (I5); the stream holds exactly the store's events from
// sequence 1 (I2).
func TestHostileClientsAgainstAProcess_S13(t *testing.T) {
	for _, mode := range []struct {
		name       string
		env        []string
		app, admin []nats.Option
	}{
		{name: "default configuration"},
		{
			name: "credentials",
			env: []string{"ORISUN_NATS_USER=app", "ORISUN_NATS_PASSWORD=app-password-1",
				"ORISUN_NATS_ADMIN_USER=admin", "ORISUN_NATS_ADMIN_PASSWORD=admin-password-1"},
			app:   []nats.Option{nats.UserInfo("app", "app-password-1")},
			admin: []nats.Option{nats.UserInfo("admin", "admin-password-1")},
		},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			port := testutil.FreePort(t)
			p := nodeIn(t, "orisun", t.TempDir(), port, append([]string{
				"ORISUN_NATS_EVENT_STREAM_MAX_BYTES=" + strconv.Itoa(hostileStreamBytes),
				"ORISUN_NATS_MAX_MEMORY=" + strconv.Itoa(hostileBudget),
			}, mode.env...)...)
			p.WaitLine(t, "orisun started", 60*time.Second)
			hostileRun(t, fmt.Sprintf("nats://127.0.0.1:%d", port), mode.app, mode.admin)
		})
	}
}

// hostileRun is one run of TestHostileClientsAgainstAProcess_S13 against
// the orisun process whose NATS is at url; app are the applications'
// credentials and admin the admin's (nil: none configured).
func hostileRun(t *testing.T, url string, app, admin []nats.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := natstest.Client(t, url, client.NATSOptions(app...), client.Timeout(10*time.Second))
	var a acks
	appendRecorded := func(ctx context.Context, in []event.Input) {
		res, err := c.Append(ctx, "default", in, nil)
		if err != nil {
			t.Logf("append failed: %v", err)
		}
		a.record(res, in, err)
	}
	// One tagged event, which makes the duplicate key's condition fail.
	appendRecorded(ctx, []event.Input{{ID: event.NewID(), Type: "hostile.seed", Data: []byte(`{}`), Tags: []string{"seat:1"}}})

	// The victim: a Go client subscription, live before the attacks.
	sub := hostileSubscribe(t, c)
	sub.live.wait(t, "the subscription", nil)
	// The steady appender.
	batch := 0
	// Its appends are not canceled by its halt: an append canceled in
	// flight may or may not be stored, and every append must be known.
	haltAppends := testutil.Every(t, 100*time.Millisecond, func(context.Context) {
		in := make([]event.Input, 5)
		for j := range in {
			in[j] = event.Input{ID: event.NewID(), Type: "hostile.steady", Data: fmt.Appendf(nil, `{"batch":%d,"j":%d}`, batch, j)}
		}
		batch++
		appendRecorded(ctx, in)
	})

	errOpt, vio := natstest.Violations()
	attacker := natstest.Connect(t, url, append(append([]nats.Option{}, app...), nats.Name("attacker"), errOpt)...)
	js := natstest.JetStream(t, attacker)
	name := stream.Name("default")

	// The forged event at the next position, with orisun's headers and the
	// real epoch.
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := st.Boundaries[0]
	forged := event.Event{ID: event.NewID(), Boundary: "default", Epoch: b.Epoch, Position: b.StreamLast + 1, Type: "hostile.steady",
		Time: time.Now().UTC(), Tags: []string{}, Data: []byte(`{"forged":true}`)}
	m, err := stream.Message(&forged, true)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(b.StreamLast, 10))
	if err := attacker.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	natstest.WaitViolation(t, vio, "Publish", m.Subject)

	// The impostor on the API's queue group: it must answer nothing.
	var diverted atomic.Int64
	if _, err := attacker.QueueSubscribe("orisun.api.append.*", "orisun", func(m *nats.Msg) {
		k := 1_000_000 + diverted.Add(1)
		m.Respond(fmt.Appendf(nil, `{"epoch":%q,"first":%d,"last":%d}`, b.Epoch, k, k))
	}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitViolation(t, vio, "Subscription", "orisun.api.append.*")

	// Stream tampering: subjects, limits, purge, message delete, delete.
	update := func(mutate func(*jetstream.StreamConfig)) func(context.Context) error {
		return func(ctx context.Context) error {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			cfg := s.CachedInfo().Config
			mutate(&cfg)
			_, err = js.UpdateStream(ctx, cfg)
			return err
		}
	}
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.UPDATE."+name, update(func(c *jetstream.StreamConfig) {
		c.Subjects = []string{"orisun.events.default.elsewhere"}
	}))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.UPDATE."+name, update(func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 }))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.PURGE."+name, purgeOf(js, name))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.MSG.DELETE."+name, deleteMsgOf(js, name, 1))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.DELETE."+name, func(ctx context.Context) error { return js.DeleteStream(ctx, name) })

	// Consumer exhaustion, then a second application.
	hogs := hogConsumers(t, ctx, js, name, 1000)
	second := natstest.Client(t, url, client.NATSOptions(app...), client.Timeout(10*time.Second))
	sub2 := hostileSubscribe(t, second)
	relayed, _ := a.snapshot()
	testutil.Eventually(t, "the second application's subscription to deliver 50 events more than were acknowledged at its start", 60*time.Second,
		20*time.Millisecond, func() bool { return sub2.rec.delivered() >= uint64(len(relayed)+50) })
	if page, err := second.Read(ctx, "default", 0, 10, nil); err != nil || len(page.Events) != 10 {
		t.Fatalf("the second application's read during the exhaustion: %d events, %v", len(page.Events), err)
	}
	if s, err := natstest.JetStream(t, second.Conn()).Stream(ctx, name); err != nil {
		t.Fatalf("the second application's stream info during the exhaustion: %v", err)
	} else if msg, err := s.GetMsg(ctx, 1); err != nil || msg.Sequence != 1 {
		t.Fatalf("the second application's message get during the exhaustion: %v", err)
	}

	// Boundaries beyond the memory budget.
	creator := c
	if admin != nil {
		if err := attacker.Publish(api.SubjectCreateBoundary, []byte(`{"name":"sneaky"}`)); err != nil {
			t.Fatal(err)
		}
		natstest.WaitViolation(t, vio, "Publish", api.SubjectCreateBoundary)
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.CreateBoundary(actx, "sneaky")
		acancel()
		if err == nil {
			t.Fatal("the application created a boundary")
		}
		creator, err = client.Connect(url, client.NATSOptions(admin...), client.Timeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(creator.Close)
	}
	if _, err := creator.CreateBoundary(ctx, "second"); err != nil {
		t.Fatalf("the second boundary's stream fits the budget: %v", err)
	}
	_, err = creator.CreateBoundary(ctx, "third")
	checkBudgetError(t, err, "third", hostileBudget, hostileStreamBytes)

	// A duplicate key: the failing condition, then null.
	dupID := event.NewID()
	reply, err := attacker.RequestWithContext(ctx, "orisun.api.append.default", fmt.Appendf(nil,
		`{"events":[{"id":%q,"type":"hostile.dup","data":{}}],"condition":{"query":{"items":[{"tags":["seat:1"]}]},"after":0},"condition":null}`, dupID))
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	if reply.Header.Get(api.ErrorCodeHeader) != strconv.Itoa(api.NumericCode(api.CodeInvalid)) || json.Unmarshal(reply.Data, &eb) != nil ||
		!strings.Contains(eb.Error.Message, `duplicate key "condition"`) {
		t.Fatalf("an append with \"condition\" twice: %s %s, want invalid naming the key", reply.Header, reply.Data)
	}

	// The end: appends stop, the status settles with no warning.
	haltAppends()
	st = settledClean(t, c)
	head := st.Boundaries[0].Head
	if len(st.Boundaries) != 2 {
		t.Fatalf("boundaries %+v, want default and second", st.Boundaries)
	}
	acked, failed := a.snapshot()
	if failed != 0 {
		t.Fatalf("%d appends failed during the attacks", failed)
	}
	if diverted.Load() != 0 {
		t.Fatalf("the impostor answered %d appends", diverted.Load())
	}
	stored := checkExactlyOnce(t, acked, func(after uint64) []event.Event {
		page, err := c.Read(ctx, "default", after, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		return page.Events
	})
	if len(stored) != len(acked) || uint64(len(stored)) != head {
		t.Fatalf("the store holds %d events (head %d); %d were acknowledged (I1)", len(stored), head, len(acked))
	}
	for _, s := range []*hostileSub{sub, sub2} {
		s.sameAsStored(t, stored)
	}
	t.Logf("head %d; %d hog consumers; the second subscription fell back %d times, %d for a refused consumer",
		head, hogs, sub2.fallBacks.Load(), sub2.refused.Load())
	if sub2.refused.Load() == 0 {
		t.Fatal("the second subscription was never refused a consumer: the exhaustion exhausted nothing, and the test shows nothing")
	}

	// The stream is orisun's: its configuration, and from sequence 1 the
	// store's events (I2). The hog's consumers go first: the check reads
	// with a consumer.
	dropConsumers(t, ctx, js, name)
	s := natstest.Stream(t, js, name)
	if info := s.CachedInfo(); !orisunSubjects(info) || info.Config.MaxMsgs != -1 || info.Config.MaxBytes != hostileStreamBytes {
		t.Fatalf("the stream's configuration is not orisun's: %+v", info.Config)
	}
	if first, last := checkStreamMatches(t, attacker, stored); first != 1 || last != head {
		t.Fatalf("the stream holds %d..%d, want 1..%d", first, last, head)
	}
}

// hostileSub is a Go client subscription to the default boundary from the
// start, its deliveries recorded.
type hostileSub struct {
	rec       *recorder
	live      *liveSignal
	fallBacks atomic.Int64
	// refused counts the fall-backs whose reason is a consumer JetStream
	// refused.
	refused atomic.Int64
	stop    func() error
}

func hostileSubscribe(t *testing.T, c *client.Client) *hostileSub {
	s := &hostileSub{rec: newRecorder(0), live: newLiveSignal()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, "default", 0, s.rec.handle, client.SubscribeOptions{
			OnCaughtUp: s.live.caughtUp,
			OnFellBehind: func(_ uint64, reason string) {
				s.fallBacks.Add(1)
				if strings.Contains(reason, "maximum consumers limit reached") {
					s.refused.Add(1)
				}
			},
		})
	}()
	s.stop = sync.OnceValue(func() error {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
	t.Cleanup(func() { s.stop() })
	return s
}

// sameAsStored waits until the subscription delivered the store's head,
// ends it, and asserts it delivered exactly stored, the store's ids by
// position (I5).
func (s *hostileSub) sameAsStored(t *testing.T, stored map[uint64]string) {
	t.Helper()
	waitDelivered(t, s.rec, uint64(len(stored)), 60*time.Second)
	if err := s.stop(); err != nil {
		t.Fatalf("the subscription ended with %v", err)
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.ids) != len(stored) {
		t.Fatalf("the subscription delivered %d events, the store holds %d (I5)", len(s.rec.ids), len(stored))
	}
	for pos, id := range stored {
		if s.rec.ids[pos] != id {
			t.Fatalf("position %d: the subscription delivered %q, the store holds %s (I5)", pos, s.rec.ids[pos], id)
		}
	}
}

// snapshot returns a copy of the acknowledged positions and ids, and how
// many appends failed.
func (a *acks) snapshot() (map[uint64]string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.acked), a.failed
}

// hogConsumers creates n durable consumers on the stream name, 16 at a
// time, as an application that then abandons them; it fails the test
// unless JetStream refused some for its consumer limit (the stream is
// exhausted), and returns how many it created.
func hogConsumers(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, n int) int {
	t.Helper()
	var created, refused atomic.Int64
	var mu sync.Mutex
	var failure error
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				_, err := js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: fmt.Sprintf("hog%d", i)})
				switch {
				case err == nil:
					created.Add(1)
				case errors.Is(err, jetstream.ErrMaximumConsumersLimit):
					refused.Add(1)
				default:
					mu.Lock()
					failure = fmt.Errorf("consumer hog%d: %w", i, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if refused.Load() == 0 {
		t.Fatalf("JetStream took all %d consumers: the stream is not exhausted", n)
	}
	t.Logf("the hog created %d consumers; JetStream refused %d more", created.Load(), refused.Load())
	return int(created.Load())
}

// dropConsumers deletes every consumer of the stream name, 16 at a time.
func dropConsumers(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) {
	t.Helper()
	s := natstest.Stream(t, js, name)
	names := s.ConsumerNames(ctx)
	todo := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for c := range todo {
				if err := js.DeleteConsumer(ctx, name, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
					failed.Add(1)
				}
			}
		})
	}
	for c := range names.Name() {
		todo <- c
	}
	close(todo)
	wg.Wait()
	if err := names.Err(); err != nil || failed.Load() > 0 {
		t.Fatalf("deleting the stream's consumers: %v, %d deletes failed", err, failed.Load())
	}
}

// settledClean waits until the node's status (through the API) is
// settled, with no warning, every boundary leading, and returns it.
func settledClean(t *testing.T, c *client.Client) client.Status {
	t.Helper()
	var st client.Status
	var err error
	testutil.Eventually(t, "the status settled with no warning, every boundary leading", 60*time.Second, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err = c.Status(ctx)
		if err != nil || !st.Settled || st.Warning != "" {
			return false
		}
		for _, b := range st.Boundaries {
			if b.Warning != "" || b.State != "leading" {
				return false
			}
		}
		return true
	})
	return st
}
