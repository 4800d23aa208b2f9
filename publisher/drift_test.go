package publisher_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/stream"
)

// TestFreshStreamHasNoDrift: a stream JetStream created from orisun's
// configuration compares equal to it, whatever the limits, so a check never
// "repairs" a stream nobody touched.
func TestFreshStreamHasNoDrift(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, lim := range []stream.Limits{
		{},
		{MaxBytes: 1 << 20, MaxMsgs: 100, MaxAge: time.Hour},
		{MaxAge: time.Minute, Duplicates: 10 * time.Second},
		{MaxAge: 30 * time.Second},
	} {
		want := stream.Config("b", "e", lim, 5)
		s, err := e.js.CreateStream(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		have := s.CachedInfo().Config
		if d := publisher.ConfigDrift(&have, &want); len(d) != 0 {
			t.Errorf("limits %+v: a fresh stream drifts: %v", lim, d)
		}
		if err := e.js.DeleteStream(ctx, want.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigDriftLeavesAllowBatched: allow_batched is no drift either way
// (docs/design.md §5): nodes that read different JetStream API levels, or
// a server upgraded under a stream, must not make leaders turn it on and
// off; every other flag on the same stream still drifts.
func TestConfigDriftLeavesAllowBatched(t *testing.T) {
	for _, batched := range []bool{false, true} {
		want := stream.Config("b", "e", stream.Limits{Batched: batched}, 5)
		have := want
		have.AllowBatchPublish = !batched
		if d := publisher.ConfigDrift(&have, &want); len(d) != 0 {
			t.Errorf("want allow_batched %v, the stream has %v: drift %v, want none", batched, !batched, d)
		}
		have.AllowDirect = !want.AllowDirect
		if d := publisher.ConfigDrift(&have, &want); len(d) != 1 || d[0].Field != "allow_direct" {
			t.Errorf("allow_direct changed beside allow_batched: drift %+v, want allow_direct alone", d)
		}
	}
}

// TestConfigDriftFoundAndPutBack: each setting someone can change on a
// stream is found, named, and either put back by an update built from
// orisun's configuration (after which nothing drifts), or, when JetStream
// cannot undo it in place, marked to be recreated (and JetStream indeed
// refuses the update).
func TestConfigDriftFoundAndPutBack(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	lim := stream.Limits{MaxBytes: 1 << 20, MaxAge: time.Hour}
	cases := []struct {
		field    string
		mutate   func(c *jetstream.StreamConfig)
		recreate bool
	}{
		{"subjects", func(c *jetstream.StreamConfig) { c.Subjects = []string{"orisun.attack.>"} }, false},
		{"max_msgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 }, false},
		{"max_bytes", func(c *jetstream.StreamConfig) { c.MaxBytes = 1024 }, false},
		{"max_age", func(c *jetstream.StreamConfig) { c.MaxAge, c.Duplicates = time.Second, time.Second }, false},
		{"max_msg_size", func(c *jetstream.StreamConfig) { c.MaxMsgSize = 16 }, false},
		{"max_msgs_per_subject", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 1 }, false},
		{"max_consumers", func(c *jetstream.StreamConfig) { c.MaxConsumers = 1 }, false},
		{"discard", func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardNew }, false},
		{"retention", func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }, false},
		{"duplicate_window", func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Minute }, false},
		{"no_ack", func(c *jetstream.StreamConfig) { c.NoAck = true }, false},
		{"allow_rollup_hdrs", func(c *jetstream.StreamConfig) { c.AllowRollup = true }, false},
		{"allow_direct", func(c *jetstream.StreamConfig) { c.AllowDirect = true }, false},
		{"republish", func(c *jetstream.StreamConfig) {
			c.RePublish = &jetstream.RePublish{Source: ">", Destination: "copy.>"}
		}, false},
		{"subject_transform", func(c *jetstream.StreamConfig) {
			c.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "orisun.events.b.>", Destination: "x.>"}
		}, false},
		{"consumer_limits", func(c *jetstream.StreamConfig) { c.ConsumerLimits.MaxAckPending = 1 }, false},
		{"description", func(c *jetstream.StreamConfig) { c.Description = "mine now" }, false},
		{"metadata", func(c *jetstream.StreamConfig) { c.Metadata["owner"] = "attacker" }, false},
		{"deny_delete", func(c *jetstream.StreamConfig) { c.DenyDelete = true }, true},
		{"deny_purge", func(c *jetstream.StreamConfig) { c.DenyPurge = true }, true},
		{"sealed", func(c *jetstream.StreamConfig) { c.Sealed = true }, true},
		{"allow_msg_ttl", func(c *jetstream.StreamConfig) { c.AllowMsgTTL = true }, true},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			want := stream.Config("b", "e", lim, 1)
			s, err := e.js.CreateStream(ctx, want)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.js.DeleteStream(ctx, want.Name) }()
			bad := s.CachedInfo().Config
			tc.mutate(&bad)
			s, err = e.js.UpdateStream(ctx, bad)
			if err != nil {
				t.Fatalf("the attacker's update: %v", err)
			}
			have := s.CachedInfo().Config
			drift := publisher.ConfigDrift(&have, &want)
			i := slices.IndexFunc(drift, func(d publisher.Drift) bool { return d.Field == tc.field })
			if i < 0 {
				t.Fatalf("%s changed, drift found: %v", tc.field, drift)
			}
			what := publisher.DescribeDrift(want.Name, drift)
			if !strings.HasPrefix(what, "stream ORISUN_b: ") || !strings.Contains(what, tc.field+" changed to ") {
				t.Fatalf("description %q does not name the stream and the field", what)
			}
			if drift[i].Recreate != tc.recreate {
				t.Fatalf("%s: recreate %v, want %v", tc.field, drift[i].Recreate, tc.recreate)
			}
			restored := publisher.Restored(&have, &want)
			if tc.field == "consumer_limits" {
				// Put back on their own (see publisher.Restored).
				if restored.ConsumerLimits == want.ConsumerLimits {
					t.Fatal("Restored puts the consumer limits back with the rest")
				}
				restored.ConsumerLimits = want.ConsumerLimits
			}
			s, err = e.js.UpdateStream(ctx, restored)
			if tc.recreate {
				// JetStream refuses the update, or takes it and keeps the
				// setting.
				if err == nil && !slices.ContainsFunc(publisher.ConfigDrift(&s.CachedInfo().Config, &want),
					func(d publisher.Drift) bool { return d.Field == tc.field }) {
					t.Fatalf("%s: JetStream put it back in place: it need not be recreated", tc.field)
				}
				t.Logf("%s: %s; JetStream does not undo it (update error: %v)", tc.field, what, err)
				return
			}
			if err != nil {
				t.Fatalf("putting back %s: %v", what, err)
			}
			have = s.CachedInfo().Config
			if d := publisher.ConfigDrift(&have, &want); len(d) != 0 {
				t.Fatalf("after putting back %s: still %v", what, d)
			}
		})
	}
}

// TestDeposedPublisherDoesNotPutBackTheStream_I6: a publisher whose lease
// term is no longer current meets a stream whose configuration is not
// orisun's (max_msgs 10, as an attacker or a leader with another
// configuration left it). Putting it back is fenced like a delete: the
// lease renewal is refused, the run ends with ErrLeaseLost, and the stream
// keeps what the current leader decides.
func TestDeposedPublisherDoesNotPutBackTheStream_I6(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stale, _ := e.deposed(t)
	b, err := e.store.Boundary(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.Config("b", b.Epoch, stream.Limits{}, 1)
	cfg.MaxMsgs = 10
	if _, err := e.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := e.publisher(e.js, nil).Run(ctx, stale); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("the deposed publisher ended with %v, want ErrLeaseLost", err)
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxMsgs; got != 10 {
		t.Fatalf("the deposed publisher changed max_msgs to %d", got)
	}
}

// TestPutBackWaitsForAController: something (a NATS controller that owns
// the stream, say) sets max_msgs back to 10 whenever orisun puts it back.
// The publisher puts it back, but after putBackBurst put-backs within a
// minute it waits, longer each time, instead of renewing its lease and
// updating the stream at every check; the warning names the fight.
func TestPutBackWaitsForAController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, p, s := checkedEvery20ms(t)
	putBacks := 0
	warned := ""
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info := natstest.Info(t, s)
		if info.Config.MaxMsgs == 10 {
			if w := p.Status().Warning; strings.Contains(w, "keeps changing it") {
				warned = w
			}
			continue
		}
		putBacks++
		cfg := info.Config
		cfg.MaxMsgs = 10
		if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// Checks every 20 ms for 3 s: without the wait, some 100 put-backs.
	// With it: 3 at once, then after 1 s, then after 2 s.
	t.Logf("put-backs in 3 s: %d; warning: %s", putBacks, warned)
	if putBacks < putBackBurst {
		t.Fatalf("%d put-backs: the drift was not put back at once", putBacks)
	}
	if putBacks > putBackBurst+3 {
		t.Fatalf("%d put-backs in 3 s: the publisher fights the controller at every check", putBacks)
	}
	if !strings.Contains(warned, "max_msgs changed to 10") || !strings.Contains(warned, "the next put-back is in") {
		t.Fatalf("the warning while the put-back waits does not name the drift and the wait: %q", warned)
	}
}

// putBackBurst is publisher.putBackBurst.
const putBackBurst = 3

// TestRefusedPutBackWaits: someone moved the stream's subjects away and a
// stream of theirs took the boundary's: JetStream refuses to put the
// subjects back (they would overlap). The idle publisher tries again after
// a wait that grows (1 s, 2 s, 4 s, …), not at every check, and its warning
// says so.
func TestRefusedPutBackWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, p, s := checkedEvery20ms(t)
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{"orisun.attack.>"}
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "THIEF", Subjects: []string{stream.Subjects("b")},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	waits := map[string]bool{}
	testutil.Eventually(t, "a put-back wait of 4 s", 20*time.Second, 10*time.Millisecond, func() bool {
		w := p.Status().Warning
		if !strings.Contains(w, "JetStream refused to put it back") {
			return false
		}
		_, in, _ := strings.Cut(w, "the next put-back is in ")
		waits[in] = true
		return in == "4s"
	})
	t.Logf("waits seen: %v", waits)
}

// TestConsumerLimitsPutBackOnTheirOwn: an upgrade. A stream an earlier
// orisun created has no consumer limits, someone lowered its max_msgs to
// 10, and an application's durable consumer on it asks to be kept two
// hours unused. JetStream refuses the limits while that consumer exists
// ("change to limits violates consumers", err_code 10069). The rest of the
// configuration is put back all the same (before, one update carried
// everything and was refused for good, max_msgs included), the warning
// names the consumer, what frees it and the wait; once it is gone the
// limits are set, logged at info level as the upgrade it is, not warned
// about as someone's change.
func TestConsumerLimitsPutBackOnTheirOwn(t *testing.T) {
	e := setup(t)
	e.append(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := e.store.Boundary(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	old := stream.Config("b", b.Epoch, stream.Limits{}, 1)
	old.ConsumerLimits = jetstream.StreamConsumerLimits{}
	old.MaxMsgs = 10
	s, err := e.js.CreateStream(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateConsumer(ctx, old.Name, jetstream.ConsumerConfig{Durable: "longer", InactiveThreshold: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	p := publisher.New(publisher.Config{
		Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50,
		PollInterval: 20 * time.Millisecond, CheckInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	run(t, p, e.lease(t))
	var info *jetstream.StreamInfo
	var warning string
	testutil.Eventually(t, "max_msgs put back, the consumer limits refused and named", 20*time.Second, 10*time.Millisecond, func() bool {
		if info, err = s.Info(ctx); err != nil {
			t.Fatal(err)
		}
		warning = p.Status().Warning
		return info.Config.MaxMsgs == -1 && info.State.LastSeq == 3 && strings.Contains(warning, "consumer_limits")
	})
	if info.Config.ConsumerLimits != (jetstream.StreamConsumerLimits{}) {
		t.Fatalf("consumer limits %+v set while a consumer asks for longer", info.Config.ConsumerLimits)
	}
	for _, want := range []string{"violates consumers: longer", "ask to be kept unused longer than 1h0m0s", "the next put-back is in"} {
		if !strings.Contains(warning, want) {
			t.Fatalf("the warning does not say %q: %s", want, warning)
		}
	}
	if strings.Contains(warning, "max_msgs") {
		t.Fatalf("the warning names max_msgs, which was put back: %s", warning)
	}
	t.Logf("warning: %s", warning)

	if err := e.js.DeleteConsumer(ctx, old.Name, "longer"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the consumer limits set once the consumer is gone", 30*time.Second, 20*time.Millisecond, func() bool {
		if info, err = s.Info(ctx); err != nil {
			t.Fatal(err)
		}
		return info.Config.ConsumerLimits.InactiveThreshold == stream.ConsumerInactiveMax && p.Status().Warning == ""
	})
	var setInfo bool
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "put back") && strings.Contains(l, "consumer_limits") && strings.Contains(l, "level=WARN") {
			t.Errorf("the upgrade's consumer limits are warned about as someone's change: %s", l)
		}
		if strings.Contains(l, "level=INFO") && strings.Contains(l, "consumer limits set") {
			setInfo = true
		}
	}
	if !setInfo {
		t.Errorf("no info line says the consumer limits were set:\n%s", logs.String())
	}
}

// syncBuffer is a log destination tests read while the publisher writes.
type syncBuffer = testutil.LogBuffer

// checkedEvery20ms runs a publisher that checks its stream every 20 ms,
// and returns it with its stream once it published 3 events.
func checkedEvery20ms(t *testing.T) (*env, *publisher.Publisher, jetstream.Stream) {
	t.Helper()
	e := setup(t)
	e.append(t, 3)
	p := publisher.New(publisher.Config{
		Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50,
		PollInterval: 20 * time.Millisecond, CheckInterval: 20 * time.Millisecond,
	})
	run(t, p, e.lease(t))
	var s jetstream.Stream
	testutil.Eventually(t, "the stream", 10*time.Second, 10*time.Millisecond, func() bool {
		var err error
		s, err = e.js.Stream(context.Background(), stream.Name("b"))
		return err == nil && s.CachedInfo().State.LastSeq == 3
	})
	return e, p, s
}
