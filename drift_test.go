package orisun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// The stream's configuration and content are orisun's (docs/design.md §12):
// an attacker with full rights on NATS changes, replaces or appends to a
// boundary's stream, and the leading publisher finds it within one poll
// interval (ORISUN_POLL_INTERVAL) and repairs it, while /status names it.
// The attacker is the node's own NATS connection (ConnectNATS), which no
// permission model refuses.

// drift is the poll interval of these tests, and repairSlack what a repair
// may take beyond it (a stream info, an update or a recreate, on a loaded
// machine).
const (
	drift       = 300 * time.Millisecond
	repairSlack = 700 * time.Millisecond
)

// attacker returns a JetStream context with full rights on the node's NATS.
func attacker(t *testing.T, n *orisun.Node) jetstream.JetStream {
	t.Helper()
	nc := natstest.NodeConn(t, n, "attacker")
	js := natstest.JetStream(t, nc)
	return js
}

// driftNode starts a node whose poll interval is poll, logging to logs.
func driftNode(t *testing.T, poll time.Duration, logs *syncBuffer) *orisun.Node {
	t.Helper()
	return setup(t, "", func(c *orisun.Config) { c.PollInterval = poll },
		orisun.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
}

// tamper changes the boundary's stream configuration as the attacker.
func tamper(t *testing.T, js jetstream.JetStream, boundary string, mutate func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := natstest.Stream(t, js, stream.Name(boundary))
	cfg := s.CachedInfo().Config
	mutate(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("the attacker's update: %v", err)
	}
}

// waitStream waits until the boundary's stream satisfies ok and returns how
// long that took.
func waitStream(t *testing.T, js jetstream.JetStream, boundary, what string, timeout time.Duration, ok func(*jetstream.StreamInfo) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var info *jetstream.StreamInfo
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, stream.Name(boundary))
		cancel()
		if err == nil {
			info = s.CachedInfo()
			if ok(info) {
				return time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s; stream %+v (err %v)", what, timeout, info, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// withinPoll fails unless a repair took at most one poll interval (plus
// the slack of the repair itself).
func withinPoll(t *testing.T, what string, took time.Duration) {
	t.Helper()
	t.Logf("%s: repaired %s after the attack (poll interval %s)", what, took.Round(time.Millisecond), drift)
	if took > drift+repairSlack {
		t.Fatalf("%s: repaired %s after the attack, more than one poll interval (%s) and %s", what, took, drift, repairSlack)
	}
}

func orisunSubjects(info *jetstream.StreamInfo) bool {
	return slices.Equal(info.Config.Subjects, []string{stream.Subjects("default")})
}

func appendN(t *testing.T, n *orisun.Node, k int) uint64 {
	t.Helper()
	return mustAppend(t, context.Background(), n, "default", events(k, "real", 32)).Last
}

// TestStreamSubjectsChangedPutBack_I5_I7: the stream's subjects changed
// (the publisher used to stall for good with "no response from stream")
// are put back within one poll interval, without an append; while another
// stream holds the boundary's subjects and the put-back is refused, every
// status read names the drift and nothing is checkpointed; once it is
// gone, publishing resumes within one poll interval and a subscriber that
// ran throughout got every event once, as the store has them.
func TestStreamSubjectsChangedPutBack_I5_I7(t *testing.T) {
	logs := &syncBuffer{}
	n := driftNode(t, drift, logs)
	ctx := context.Background()
	js := attacker(t, n)
	appendN(t, n, 5)
	waitSettled(t, n, 30*time.Second)
	r := newRecorder(0)
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	attack := func(c *jetstream.StreamConfig) { c.Subjects = []string{"orisun.attack.default.>"} }
	const named = "subjects changed to [orisun.attack.default.>] (want [orisun.events.default.>])"

	// Idle: the check finds it.
	tamper(t, js, "default", attack)
	withinPoll(t, "subjects, idle", waitStream(t, js, "default", "subjects put back", time.Minute, orisunSubjects))
	eventuallyLogged(t, logs, "stream configuration was not orisun's: put back", named)

	// Another stream takes the boundary's subjects: orisun's cannot get
	// them back, and events appended meanwhile must not count as published.
	tamper(t, js, "default", attack)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{stream.Subjects("default")},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	st := testutil.Get(t, n.Status)
	before := st.Boundaries[0].Head
	head := appendN(t, n, 3)
	deadline := time.Now().Add(4 * drift)
	reads := 0
	for time.Now().Before(deadline) {
		st := testutil.Get(t, n.Status)
		b := st.Boundaries[0]
		if !strings.Contains(b.Warning, named) {
			t.Fatalf("status read %d while the subjects are another stream's: warning %q does not name the drift", reads, b.Warning)
		}
		if st.Settled || b.Published != before {
			t.Fatalf("status read %d: settled %v, published %d; want not settled, %d (nothing of what EVIL took is published)",
				reads, st.Settled, b.Published, before)
		}
		reads++
		time.Sleep(20 * time.Millisecond)
	}
	st, _ = n.Status(ctx)
	t.Logf("%d status reads named the drift; the last: state %s, reason %q, warning %q", reads, st.Boundaries[0].State,
		st.Boundaries[0].Reason, st.Boundaries[0].Warning)
	if b := st.Boundaries[0]; b.State != "stalled" || !strings.Contains(b.Reason, named) {
		t.Fatalf("while the subjects are another stream's: state %s, reason %q; want stalled, naming the drift", b.State, b.Reason)
	}
	if err := js.DeleteStream(ctx, "EVIL"); err != nil {
		t.Fatal(err)
	}
	withinPoll(t, "subjects, after the other stream left", waitStream(t, js, "default", "subjects put back", time.Minute, orisunSubjects))

	st = waitSettled(t, n, 30*time.Second)
	if b := st.Boundaries[0]; b.Warning != "" || b.Head != head || b.StreamLast != head {
		t.Fatalf("after the repair: warning %q, head %d, stream last %d; want none, %d, %d", b.Warning, b.Head, b.StreamLast, head, head)
	}
	deliveredAsStored(t, n, r, head, stop)
}

// TestPublishMeetingChangedSubjectsNamesIt_I7: a publish that finds no
// stream because the subjects changed (on a node whose poll interval is an
// hour, so that no check comes first) fails with an error that names the
// cause, the run puts the subjects back at once and publishes: it used to
// retry "publish position N: nats: no response from stream" for good.
func TestPublishMeetingChangedSubjectsNamesIt_I7(t *testing.T) {
	logs := &syncBuffer{}
	n := driftNode(t, time.Hour, logs)
	js := attacker(t, n)
	appendN(t, n, 5)
	waitSettled(t, n, 30*time.Second)
	r := newRecorder(0)
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	tamper(t, js, "default", func(c *jetstream.StreamConfig) { c.Subjects = []string{"orisun.attack.default.>"} })
	head := appendN(t, n, 3)
	waitSettled(t, n, 30*time.Second)
	eventuallyLogged(t, logs, "stream differs from the store or from orisun's configuration: repairing it",
		"publish position 6: nats: no response from stream: stream ORISUN_default: subjects changed to [orisun.attack.default.>] "+
			"(want [orisun.events.default.>]); putting it back")
	waitStream(t, js, "default", "subjects put back", time.Minute, orisunSubjects)
	deliveredAsStored(t, n, r, head, stop)
}

// eventuallyLogged waits until one line of the log holds every part.
func eventuallyLogged(t *testing.T, logs *syncBuffer, parts ...string) {
	t.Helper()
	testutil.Until(t, fmt.Sprintf("a log line holding %q", parts), 10*time.Second, 10*time.Millisecond, func() error {
		for _, line := range strings.Split(logs.String(), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return nil
			}
		}
		return fmt.Errorf("the log:\n%s", logs.String())
	})
}

// TestStreamLimitsChangedRestored_I5: limits someone lowered on the stream
// (max_msgs to 10: never restored before; max_age, max_bytes) are put back
// to the node's within one poll interval, without an append; the stream
// then holds exactly the store's events and a subscriber from the start
// sees no difference.
func TestStreamLimitsChangedRestored_I5(t *testing.T) {
	logs := &syncBuffer{}
	n := driftNode(t, drift, logs)
	js := attacker(t, n)
	appendN(t, n, 30)
	waitSettled(t, n, 30*time.Second)
	cfg := n.Config()
	for _, tc := range []struct {
		field  string
		mutate func(*jetstream.StreamConfig)
		ok     func(*jetstream.StreamConfig) bool
	}{
		{"max_msgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 },
			func(c *jetstream.StreamConfig) bool { return c.MaxMsgs == -1 }},
		{"max_age", func(c *jetstream.StreamConfig) { c.MaxAge, c.Duplicates = time.Second, time.Second },
			func(c *jetstream.StreamConfig) bool { return c.MaxAge == cfg.EventStreamMaxAge }},
		{"max_bytes", func(c *jetstream.StreamConfig) { c.MaxBytes = 2048 },
			func(c *jetstream.StreamConfig) bool { return c.MaxBytes == cfg.EventStreamMaxBytes }},
	} {
		tamper(t, js, "default", tc.mutate)
		took := waitStream(t, js, "default", tc.field+" put back", time.Minute, func(i *jetstream.StreamInfo) bool { return tc.ok(&i.Config) })
		withinPoll(t, tc.field, took)
		eventuallyLogged(t, logs, "stream configuration was not orisun's: put back", tc.field+" changed to ")
	}
	head := appendN(t, n, 10)
	waitSettled(t, n, 30*time.Second)
	r := newRecorder(0)
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	deliveredAsStored(t, n, r, head, stop)
}

// TestStreamReplacedIsRecreatedFromCheckpoint_I2_I5: a stream someone
// deleted, or deleted and created again with another storage (which no
// update can change) or another configuration, is recreated from the
// publish checkpoint within one poll interval, without an append: memory
// storage, orisun's configuration, its next sequence at checkpoint + 1
// (I2); events appended afterwards are published at their positions and a
// subscriber sees the store's events.
func TestStreamReplacedIsRecreatedFromCheckpoint_I2_I5(t *testing.T) {
	logs := &syncBuffer{}
	n := driftNode(t, drift, logs)
	ctx := context.Background()
	js := attacker(t, n)
	head := appendN(t, n, 5)
	waitSettled(t, n, 30*time.Second)
	current := func() jetstream.StreamConfig {
		s := natstest.Stream(t, js, stream.Name("default"))
		c := s.CachedInfo().Config
		c.FirstSeq = 0
		return c
	}
	orisuns := func(i *jetstream.StreamInfo) bool {
		return i.Config.Storage == jetstream.MemoryStorage && orisunSubjects(i) && i.Config.MaxMsgs == -1 &&
			i.Config.Metadata[stream.MetaEpoch] != "" && i.State.LastSeq == head && i.State.FirstSeq == head+1
	}
	for _, tc := range []struct {
		what    string
		replace func(c jetstream.StreamConfig) *jetstream.StreamConfig
	}{
		{"deleted", func(jetstream.StreamConfig) *jetstream.StreamConfig { return nil }},
		{"file storage, orisun's metadata", func(c jetstream.StreamConfig) *jetstream.StreamConfig {
			c.Storage = jetstream.FileStorage
			return &c
		}},
		{"other configuration, no epoch", func(c jetstream.StreamConfig) *jetstream.StreamConfig {
			c.MaxMsgs, c.Metadata = 10, nil
			return &c
		}},
	} {
		c := current()
		if err := js.DeleteStream(ctx, c.Name); err != nil {
			t.Fatal(err)
		}
		if rc := tc.replace(c); rc != nil {
			if _, err := js.CreateStream(ctx, *rc); err != nil {
				t.Fatal(err)
			}
		}
		withinPoll(t, tc.what, waitStream(t, js, "default", tc.what+": recreated from the checkpoint", time.Minute, orisuns))
	}
	eventuallyLogged(t, logs, "storage changed to File (want Memory)")
	head = appendN(t, n, 5)
	waitSettled(t, n, 30*time.Second)
	if first, last := checkStream(t, n, "default"); first != 6 || last != head {
		t.Fatalf("stream %d..%d, want 6..%d", first, last, head)
	}
	r := newRecorder(0)
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	waitDelivered(t, r, head, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, r)
}

// forge publishes, as the attacker, a message at the sequence after the
// store's head with orisun's headers for that position and the boundary's
// epoch; body is its body (nil: a well-formed event).
func forge(t *testing.T, js jetstream.JetStream, n *orisun.Node, head uint64, body []byte) {
	t.Helper()
	ctx := context.Background()
	bs, err := n.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := event.NewID()
	pos := head + 1
	m := nats.NewMsg(stream.Subject("default", "real"))
	if body == nil {
		e := event.Event{ID: id, Boundary: "default", Epoch: bs[0].Epoch, Position: pos, Type: "real", Time: time.Now(),
			Tags: []string{}, Data: json.RawMessage(`{"forged":true}`)}
		fm, err := stream.Message(&e, false)
		if err != nil {
			t.Fatal(err)
		}
		m = fm
	} else {
		m.Header.Set(stream.HeaderPosition, strconv.FormatUint(pos, 10))
		m.Header.Set(stream.HeaderEpoch, bs[0].Epoch)
		m.Header.Set(stream.HeaderEventID, id)
		m.Data = body
	}
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(head)); err != nil {
		t.Fatalf("the attacker's publish: %v", err)
	}
}

// beyondHead reads the status until the stream no longer holds a sequence
// beyond the head, and fails on any read that holds one and says settled
// or does not name it (I7). It returns how many reads saw it and how long
// until the stream was repaired.
func beyondHead(t *testing.T, n *orisun.Node, head uint64, timeout time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	seen := 0
	for {
		st := testutil.Get(t, n.Status)
		b := st.Boundaries[0]
		if b.StreamLast <= b.Head && b.StreamFirst > 0 {
			return seen, time.Since(start)
		}
		if b.StreamLast <= b.Head {
			// No stream (zero figures): between the delete and the
			// create of the recreate, or the stream not measured.
			if time.Since(start) > timeout {
				t.Fatalf("no stream after %s (stream error %q)", timeout, b.StreamError)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		seen++
		want := "stream ORISUN_default holds sequence " + strconv.FormatUint(b.StreamLast, 10) + " beyond the store's head " +
			strconv.FormatUint(head, 10)
		if st.Settled || !strings.Contains(b.Warning, want) {
			t.Fatalf("status read with stream_last %d > head %d: settled %v, warning %q; want not settled, naming it",
				b.StreamLast, b.Head, st.Settled, b.Warning)
		}
		if time.Since(start) > timeout {
			t.Fatalf("the stream still holds %d beyond the head %d after %s", b.StreamLast, b.Head, timeout)
		}
	}
}

// TestForeignMessageBeyondHeadRepairedWhileIdle_I5_I7: a message someone
// appends to the stream beyond the store's head while the publisher is
// idle, with orisun's headers for the next position and the real epoch
// (first a body that is no event, then a well-formed forged event), makes
// every status read until the repair not settled, naming it (it was
// settled, "caught up", with stream_last = head + 1); the leading publisher
// recreates the stream from the checkpoint within one poll interval with no
// append (it used to wait for the next append); a subscriber live across
// the first sees no difference from the store, and so does one started
// after the second (a live subscriber takes a well-formed forgery as it
// arrives: only refusing the write prevents that).
func TestForeignMessageBeyondHeadRepairedWhileIdle_I5_I7(t *testing.T) {
	logs := &syncBuffer{}
	n := driftNode(t, drift, logs)
	js := attacker(t, n)
	head := appendN(t, n, 3)
	waitSettled(t, n, 30*time.Second)
	live := newLiveSignal()
	r := newRecorder(0)
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{OnCaughtUp: live.caughtUp})
	live.wait(t, "the subscription", nil)

	for _, body := range [][]byte{[]byte("not an event"), nil} {
		if body == nil {
			// A live subscriber would deliver a well-formed forgery.
			waitDelivered(t, r, head, 30*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			checkAgainstStore(t, n, "default", 0, r)
		}
		forge(t, js, n, head, body)
		seen, took := beyondHead(t, n, head, time.Minute)
		withinPoll(t, "foreign message beyond the head", took)
		t.Logf("%d status reads saw it, none settled", seen)
		st := waitSettled(t, n, 30*time.Second)
		if b := st.Boundaries[0]; b.Head != head || b.StreamLast != head || b.StreamFirst != head+1 {
			t.Fatalf("after the repair: head %d, stream %d..%d; want the stream recreated at %d, empty", b.Head, b.StreamFirst, b.StreamLast, head+1)
		}
		head = appendN(t, n, 3)
		waitSettled(t, n, 30*time.Second)
		checkStream(t, n, "default")
	}
	eventuallyLogged(t, logs, "recreating it from the checkpoint", "foreign messages in the stream")

	r = newRecorder(0)
	stop = subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{})
	waitDelivered(t, r, head, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, r)
}

// TestStatusNamesStreamDriftWhileItLasts_I7: on a node whose poll interval
// is an hour (so no check repairs anything during the test), every status
// read names a changed limit and a foreign message beyond the head, and
// the latter is never settled: the status measures the stream against the
// store and orisun's configuration itself, on every request.
func TestStatusNamesStreamDriftWhileItLasts_I7(t *testing.T) {
	n := driftNode(t, time.Hour, &syncBuffer{})
	ctx := context.Background()
	js := attacker(t, n)
	head := appendN(t, n, 3)
	waitSettled(t, n, 30*time.Second)
	// The publisher's first check ran when it became idle; the next is an
	// hour away.
	time.Sleep(200 * time.Millisecond)
	tamper(t, js, "default", func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 })
	for i := 0; i < 20; i++ {
		st := testutil.Get(t, n.Status)
		if w := st.Boundaries[0].Warning; !strings.Contains(w, "stream ORISUN_default: max_msgs changed to 10 (want unlimited)") {
			t.Fatalf("status read %d: warning %q does not name the changed max_msgs", i, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
	forge(t, js, n, head, nil)
	for i := 0; i < 20; i++ {
		st := testutil.Get(t, n.Status)
		b := st.Boundaries[0]
		if st.Settled || b.StreamLast != head+1 || !strings.Contains(b.Warning, "holds sequence 4 beyond the store's head 3") {
			t.Fatalf("status read %d with a foreign message beyond the head: settled %v, stream last %d, warning %q",
				i, st.Settled, b.StreamLast, b.Warning)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := n.Status(ctx)
	t.Logf("warning: %s", st.Boundaries[0].Warning)
}

// TestStatusUnderAppendsNamesNoForeignMessage_I7: an append committed and
// published between the status's read of the head and its read of the
// stream leaves the stream legitimately beyond the head read first. The
// status must read the head again and name no foreign message, yet not be
// settled (its checkpoint does not cover the append). A test hook appends,
// and waits for the publish, at that very moment of each status read, so
// every read below meets the case.
func TestStatusUnderAppendsNamesNoForeignMessage_I7(t *testing.T) {
	var n *orisun.Node
	var js jetstream.JetStream
	var appended atomic.Int64
	n = setup(t, "", func(c *orisun.Config) { c.PollInterval = drift }, testhooks.Option[orisun.Option](testhooks.Hooks{
		BeforeStreamMeasured: func(boundary string) {
			if js == nil {
				return // the node's own status reads while it starts
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := n.Append(ctx, boundary, events(1, "between", 32), nil)
			if err != nil {
				t.Error(err)
				return
			}
			for ctx.Err() == nil {
				if s, err := js.Stream(ctx, stream.Name(boundary)); err == nil && s.CachedInfo().State.LastSeq >= res.Last {
					appended.Add(1)
					return
				}
				time.Sleep(time.Millisecond)
			}
			t.Errorf("position %d not published within 10 s", res.Last)
		},
	}))
	js = attacker(t, n)
	for i := range 3 {
		before := appended.Load()
		st := testutil.Get(t, n.Status)
		if appended.Load() != before+1 {
			t.Fatalf("status read %d: the hook did not append and publish between the reads", i)
		}
		b := st.Boundaries[0]
		if b.StreamLast <= b.Head {
			t.Fatalf("status read %d: stream_last %d, head %d: the append between the reads is not in the report", i, b.StreamLast, b.Head)
		}
		if strings.Contains(b.Warning, "beyond the store's head") {
			t.Fatalf("status read %d names a foreign message for an append: %q (stream_last %d, head %d)", i, b.Warning, b.StreamLast, b.Head)
		}
		if st.Settled {
			t.Fatalf("status read %d settled with stream_last %d beyond the head %d it read", i, b.StreamLast, b.Head)
		}
	}
}

// deliveredAsStored waits until the subscription recorded by r (from 0,
// ended by stop) delivered head events, ends it, and checks what it
// delivered against the store and the stream against the store (I2, I5).
func deliveredAsStored(t *testing.T, n *orisun.Node, r *recorder, head uint64, stop func() error) {
	t.Helper()
	waitDelivered(t, r, head, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", 0, r)
	checkStream(t, n, "default")
}
