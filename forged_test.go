package orisun_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// TestForgedEventRefusedByDefault_S13_I5: with the default configuration
// (no credentials, loopback), a local NATS client without credentials
// publishes a forged event on orisun.events.default.real: orisun's headers,
// the boundary's real epoch, the next position, a well-formed event body
// and the expected last sequence. The server refuses it (a permissions
// violation), and a Go client subscription (client.Subscribe) that then
// receives real appends delivers exactly the store's events, each compared
// with a read of the store (I5).
//
// The negative control runs the same attack with the permission model
// switched off (testhooks.Hooks.PermissionsOff): the publish is accepted and
// the subscription delivers the forgery as position 4, which the store
// never held. It shows that the comparison would see a forgery, so that
// the run with the model on proves something.
func TestForgedEventRefusedByDefault_S13_I5(t *testing.T) {
	t.Run("permissions on", func(t *testing.T) {
		t.Parallel()
		o := forgedEventAttack(t, true)
		if len(o.diffs) > 0 {
			t.Fatalf("the subscription differs from the store (I5):\n%s", strings.Join(o.diffs, "\n"))
		}
		if !o.refused {
			t.Fatal("the forged publish got no permissions violation")
		}
		t.Logf("refused; the subscription delivered %d events, each the store's", o.delivered)
	})
	t.Run("permissions off (negative control)", func(t *testing.T) {
		t.Parallel()
		o := forgedEventAttack(t, false)
		if o.refused {
			t.Fatal("the forged publish was refused with the permission model off: the seam does not switch it off")
		}
		if !o.forgeryDelivered || len(o.diffs) == 0 {
			t.Fatalf("the forgery was not delivered with the permission model off (diffs %v): "+
				"the attack does not reach the subscriber, and the run with the model on proves nothing", o.diffs)
		}
		t.Logf("with the model off the forgery was delivered: %s", strings.Join(o.diffs, "; "))
	})
}

// forgeryOutcome is what one run of the forged-event attack saw.
type forgeryOutcome struct {
	// refused: the server told the attacker its publish was a permissions
	// violation.
	refused bool
	// forgeryDelivered: the subscription delivered the forged event.
	forgeryDelivered bool
	// delivered is how many events the subscription delivered.
	delivered int
	// diffs are the differences between what the subscription delivered
	// and the store: an event that is not the store's at its position, a
	// position delivered twice or never.
	diffs []string
}

// attackedNode starts a node with the default configuration, its
// permission model on or (the negative control) off.
func attackedNode(t *testing.T, permissionsOn bool) *orisun.Node {
	t.Helper()
	var opts []orisun.Option
	if !permissionsOn {
		opts = append(opts, testhooks.Option[orisun.Option](testhooks.Hooks{PermissionsOff: true}))
	}
	return setup(t, "", nil, opts...)
}

// forgedEventAttack runs the forged-event attack against a node with the
// default configuration, its permission model on or off.
func forgedEventAttack(t *testing.T, permissionsOn bool) forgeryOutcome {
	n := attackedNode(t, permissionsOn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	epoch := threeRealEvents(t, ctx, n)

	// The victim: the Go client, live on the stream.
	c := natstest.Client(t, n.NATSURL())
	var mu sync.Mutex
	var got []event.Event
	live := newLiveSignal()
	sctx, scancel := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() {
		subDone <- c.Subscribe(sctx, "default", 0, func(_ context.Context, e event.Event) error {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
			return nil
		}, client.SubscribeOptions{OnCaughtUp: live.caughtUp})
	}()
	live.wait(t, "the subscription", subDone)

	// The attacker: a plain NATS client without credentials, over TCP.
	errOpt, vio := natstest.Violations()
	attacker := natstest.Connect(t, n.NATSURL(), nats.Name("forger"), errOpt)
	forged := event.Event{ID: event.NewID(), Boundary: "default", Epoch: epoch, Position: 4, Type: "real",
		Time: time.Now().UTC(), Tags: []string{}, Data: []byte(`{"forged":true}`), Metadata: []byte(`null`)}
	m, err := stream.Message(&forged, true)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(jetstream.ExpectedLastSeqHeader, "3")
	if err := attacker.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	var o forgeryOutcome
	// Either the server refuses the publish, or the forgery reaches the
	// subscriber; both take milliseconds.
	isForged := func(e event.Event) bool { return e.ID == forged.ID }
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case err := <-vio:
			if strings.Contains(err.Error(), `Publish to "`+m.Subject+`"`) {
				o.refused = true
				break wait
			}
		case <-deadline:
			break wait
		case <-time.After(10 * time.Millisecond):
			mu.Lock()
			for _, e := range got {
				if isForged(e) {
					o.forgeryDelivered = true
				}
			}
			mu.Unlock()
			if o.forgeryDelivered {
				break wait
			}
		}
	}

	// Real appends after the attempt: positions 4 to 9.
	for i := 0; i < 3; i++ {
		mustAppend(t, ctx, n, "default", events(2, "real", 32))
	}
	upTo := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		var top uint64
		for _, e := range got {
			top = max(top, e.Position)
		}
		return top
	}
	for end := time.Now().Add(60 * time.Second); upTo() < 9 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	scancel()
	if err := <-subDone; err != nil && !errors.Is(err, context.Canceled) {
		o.diffs = append(o.diffs, fmt.Sprintf("the subscription ended with %v", err))
	}

	mu.Lock()
	defer mu.Unlock()
	o.delivered = len(got)
	byPos := map[uint64][]event.Event{}
	for _, e := range got {
		byPos[e.Position] = append(byPos[e.Position], e)
		if isForged(e) {
			o.forgeryDelivered = true
		}
	}
	_, stored, err := n.Read(ctx, "default", 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 9 {
		t.Fatalf("the store holds %d events, want 9", len(stored))
	}
	for _, s := range stored {
		ds := byPos[s.Position]
		delete(byPos, s.Position)
		switch {
		case len(ds) == 0:
			o.diffs = append(o.diffs, fmt.Sprintf("position %d never delivered", s.Position))
			continue
		case len(ds) > 1:
			o.diffs = append(o.diffs, fmt.Sprintf("position %d delivered %d times", s.Position, len(ds)))
		}
		for _, d := range ds {
			if why := sameEvent(d, s); why != "" {
				o.diffs = append(o.diffs, fmt.Sprintf("position %d: delivered %s (id %s), the store's differs: %s", s.Position, d.Data, d.ID, why))
			}
		}
	}
	for p, ds := range byPos {
		o.diffs = append(o.diffs, fmt.Sprintf("position %d delivered %d times, not in the store", p, len(ds)))
	}
	return o
}

// sameEvent says how a delivered event differs from the stored one ("" when
// it does not).
func sameEvent(d, s event.Event) string {
	switch {
	case d.ID != s.ID:
		return fmt.Sprintf("id %s", s.ID)
	case d.Epoch != s.Epoch || d.Boundary != s.Boundary || d.Type != s.Type:
		return fmt.Sprintf("epoch %s, boundary %s, type %s", s.Epoch, s.Boundary, s.Type)
	case !d.Time.Equal(s.Time):
		return fmt.Sprintf("time %s", s.Time)
	case !bytes.Equal(d.Data, s.Data) || !bytes.Equal(orNull(d.Metadata), orNull(s.Metadata)):
		return fmt.Sprintf("data %s, metadata %s", s.Data, s.Metadata)
	case strings.Join(d.Tags, ",") != strings.Join(s.Tags, ","):
		return fmt.Sprintf("tags %v", s.Tags)
	}
	return ""
}

// orNull is absent JSON as null: an event without metadata reads as either.
func orNull(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// TestImpostorAPIRefusedByDefault_S13_I1: with the default configuration a
// local NATS client without credentials joins the API's queue group on
// orisun.api.append.* to answer appends in orisun's place. The server
// refuses the subscription (a permissions violation), and 200 appends
// through the Go client all land in the store, each at the position its
// acknowledgement names (I1). With the permission model switched off
// (the negative control) the impostor gets a share of the requests.
func TestImpostorAPIRefusedByDefault_S13_I1(t *testing.T) {
	t.Run("permissions on", func(t *testing.T) {
		t.Parallel()
		o := impostorAttack(t, true)
		if !o.refused {
			t.Fatal("the impostor's subscription got no permissions violation")
		}
		if o.diverted != 0 || len(o.problems) > 0 {
			t.Fatalf("the impostor answered %d appends; problems:\n%s", o.diverted, strings.Join(o.problems, "\n"))
		}
	})
	t.Run("permissions off (negative control)", func(t *testing.T) {
		t.Parallel()
		o := impostorAttack(t, false)
		if o.refused || o.diverted == 0 {
			t.Fatalf("with the permission model off the impostor was refused (%v) or answered nothing (%d): the run with the model on proves nothing",
				o.refused, o.diverted)
		}
		t.Logf("with the model off the impostor answered %d of 200 appends; %d problems, first: %v", o.diverted, len(o.problems), o.problems[:min(1, len(o.problems))])
	})
}

type impostorOutcome struct {
	refused  bool
	diverted int64
	// problems: appends that failed, or were acknowledged at a position
	// where the store holds another event or none.
	problems []string
}

func impostorAttack(t *testing.T, permissionsOn bool) impostorOutcome {
	n := attackedNode(t, permissionsOn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bs, err := n.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	epoch := bs[0].Epoch

	errOpt, vio := natstest.Violations()
	impostor := natstest.Connect(t, n.NATSURL(), nats.Name("impostor"), errOpt)
	var o impostorOutcome
	var diverted atomic.Int64
	const subject = "orisun.api.append.*"
	if _, err := impostor.QueueSubscribe(subject, "orisun", func(m *nats.Msg) {
		k := 1000 + diverted.Add(1)
		m.Respond(fmt.Appendf(nil, `{"epoch":%q,"first":%d,"last":%d}`, epoch, k, k))
	}); err != nil {
		t.Fatal(err)
	}
	if err := impostor.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-vio:
		o.refused = strings.Contains(err.Error(), "Subscription") && strings.Contains(err.Error(), `"`+subject+`"`)
	case <-time.After(3 * time.Second):
	}

	c := natstest.Client(t, n.NATSURL())
	acked := map[string]uint64{}
	for i := 0; i < 200; i++ {
		id := event.NewID()
		res, err := c.Append(ctx, "default", []event.Input{{ID: id, Type: "impostor.test", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}}, nil)
		if err != nil {
			o.problems = append(o.problems, fmt.Sprintf("append %d: %v", i, err))
			continue
		}
		if res.First != res.Last {
			o.problems = append(o.problems, fmt.Sprintf("append %d of one event acknowledged as %d..%d", i, res.First, res.Last))
		}
		acked[id] = res.First
	}
	_, stored, err := n.Read(ctx, "default", 0, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := map[uint64]string{}
	for _, e := range stored {
		at[e.Position] = e.ID
	}
	for id, p := range acked {
		if at[p] != id {
			o.problems = append(o.problems, fmt.Sprintf("event %s acknowledged at %d, where the store holds %q", id, p, at[p]))
		}
	}
	if len(stored) != len(acked) {
		o.problems = append(o.problems, fmt.Sprintf("%d appends acknowledged, the store holds %d events", len(acked), len(stored)))
	}
	o.diverted = diverted.Load()
	return o
}

// TestForgedStreamMessageNeverDelivered_I5: a message that someone who
// may write into the stream (orisun's own connection here; on an external
// NATS, whoever its operator lets) put there at the next sequence, with
// orisun's position and epoch headers but a body that is no event, is never
// delivered and does not end the subscription: like any foreign message it
// sends the subscription back to the store, which delivers the real event
// at that position once it is committed.
func TestForgedStreamMessageNeverDelivered_I5(t *testing.T) {
	n := setup(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	epoch := threeRealEvents(t, ctx, n)

	r := newRecorder(0)
	live := newLiveSignal()
	var mu sync.Mutex
	var reasons []string
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{
		OnCaughtUp: live.caughtUp,
		OnFellBehind: func(_ uint64, reason string) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
		},
	})
	live.wait(t, "the subscription", nil)

	// The foreign message takes sequence 4 before orisun publishes
	// position 4. Only orisun's own connection may write there.
	nc := natstest.NodeConn(t, n, "foreign-writer")
	js := natstest.JetStream(t, nc)
	// Caught up is said before the live consumer exists: forged before
	// it, the message can be gone (the node's stream check puts a stream
	// ahead of the store back) before a consumer meets it, and the
	// subscription then never meets it (seen once under CI's load).
	st := natstest.Stream(t, js, stream.Name("default"))
	testutil.Eventually(t, "the subscription's live consumer", 30*time.Second, 10*time.Millisecond, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Consumers > 0
	})
	m := nats.NewMsg(stream.Subject("default", "real"))
	m.Header.Set(stream.HeaderPosition, "4")
	m.Header.Set(stream.HeaderEpoch, epoch)
	m.Header.Set(stream.HeaderEventID, "00000000-0000-7000-8000-000000000000")
	m.Data = []byte(`not an event`)
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(3)); err != nil {
		t.Fatalf("publishing the foreign message: %v", err)
	}
	testutil.Eventually(t, "the subscription to meet the foreign message and go back to the store", 30*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reasons) > 0
	})
	for i := 0; i < 3; i++ {
		mustAppend(t, ctx, n, "default", events(2, "real", 32))
	}
	waitDelivered(t, r, 9, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("the subscription ended with %v", err)
	}
	checkAgainstStore(t, n, "default", 0, r)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("fell back %d times, first: %s", len(reasons), reasons[0])
	if !strings.Contains(reasons[0], "sequence 4") {
		t.Fatalf("fell back with %q, want the reason to name sequence 4", reasons[0])
	}
}

// threeRealEvents appends three events to the default boundary, waits until
// they are published, and returns the boundary's epoch: what a forger
// needs to know.
func threeRealEvents(t *testing.T, ctx context.Context, n *orisun.Node) string {
	t.Helper()
	appendSettled(t, ctx, n, events(3, "real", 32), 30*time.Second)
	bs, err := n.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bs[0].Epoch
}
