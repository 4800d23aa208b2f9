package orisun_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testcert"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// TestAccessControl_S13_I2_I4: with authentication on (user and password,
// a token, a token over TLS), a NATS client without credentials or with
// wrong ones cannot connect; with the default configuration (no
// credentials) a client without them connects as the application. Either
// way the application client reads the event stream from sequence 1 with
// an ordered consumer, but every attempt to write into it (publish on
// orisun.events.>, purge, delete, update, message delete, a stream of its
// own over orisun.events.>) is refused by the server. After the attempts
// the stream is intact (I2: sequence s still carries position s,
// unchanged) and the relay still publishes new appends (I4).
func TestAccessControl_S13_I2_I4(t *testing.T) {
	certs := testcert.Write(t, t.TempDir())
	for _, mode := range []struct {
		name  string
		cfg   func(*orisun.Config)
		base  []nats.Option // every client's (the CA of TLS)
		creds []nats.Option
		wrong []nats.Option
	}{
		{
			name:  "user",
			cfg:   func(c *orisun.Config) { c.NATSUser, c.NATSPassword = "app", "app-password-1" },
			creds: []nats.Option{nats.UserInfo("app", "app-password-1")},
			wrong: []nats.Option{nats.UserInfo("app", "app-password-2")},
		},
		{
			name:  "token",
			cfg:   func(c *orisun.Config) { c.NATSToken = "token-0123456789" },
			creds: []nats.Option{nats.Token("token-0123456789")},
			wrong: []nats.Option{nats.Token("token-9876543210")},
		},
		{
			name: "token over TLS",
			cfg: func(c *orisun.Config) {
				c.NATSToken = "token-0123456789"
				c.NATSTLSCert, c.NATSTLSKey = certs.Cert, certs.Key
			},
			base:  []nats.Option{nats.RootCAs(certs.CA)},
			creds: []nats.Option{nats.Token("token-0123456789")},
			wrong: []nats.Option{nats.Token("token-9876543210")},
		},
		// The default: no credentials to check, none refused, and the
		// same permissions.
		{name: "default configuration"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			n := setup(t, "", mode.cfg)
			checkAccess(t, n, mode.base, mode.creds, mode.wrong)
		})
	}
}

func checkAccess(t *testing.T, n *orisun.Node, base, creds, wrong []nats.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	appendSettled(t, ctx, n, events(20, "access.test", 64), 30*time.Second)

	for name, opts := range map[string][]nats.Option{"no credentials": nil, "wrong credentials": wrong} {
		if creds == nil {
			break // nothing is refused at connect without credentials configured
		}
		natstest.Refused(t, n.NATSURL(), "a client with "+name, append(slices.Clone(base), opts...)...)
	}

	errOpt, vio := natstest.Violations()
	app, err := nats.Connect(n.NATSURL(), append(append(append([]nats.Option{}, base...), creds...), errOpt)...)
	if err != nil {
		t.Fatalf("application client: %v", err)
	}
	t.Cleanup(app.Close)
	js := natstest.JetStream(t, app)
	before := readStream(t, ctx, js, 20)

	name := stream.Name("default")
	refusedWrite(t, ctx, vio, "orisun.events.default.access.test", func(ctx context.Context) error {
		_, err := js.Publish(ctx, "orisun.events.default.access.test", []byte(`{"forged":true}`),
			jetstream.WithExpectLastSequence(20))
		return err
	})
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.PURGE."+name, purgeOf(js, name))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.MSG.DELETE."+name, deleteMsgOf(js, name, 5))
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.UPDATE."+name, func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs = 1
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.DELETE."+name, func(ctx context.Context) error { return js.DeleteStream(ctx, name) })
	refusedWrite(t, ctx, vio, "$JS.API.STREAM.CREATE.SHADOW", func(ctx context.Context) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHADOW", Subjects: []string{"orisun.events.>"}, Storage: jetstream.MemoryStorage})
		return err
	})

	// Service discovery works for the application user (nats micro ls).
	if m, err := app.RequestWithContext(ctx, "$SRV.INFO.orisun", nil); err != nil || !strings.Contains(string(m.Data), `"name":"orisun"`) {
		t.Fatalf("$SRV.INFO.orisun as the application user: %v %v", m, err)
	}
	// A forged reply subject: the API answers a request whose reply
	// subject is inside the event subjects. Its answer must not land in
	// the stream (the API's connection may not publish there).
	if err := app.PublishRequest("orisun.api.boundaries", "orisun.events.default.forged", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// A push consumer delivering into the event subjects: it delivers only
	// where someone subscribes, and the application may not subscribe there.
	cfg := fmt.Sprintf(`{"stream_name":%q,"config":{"deliver_subject":"orisun.events.default.injected","ack_policy":"none","deliver_policy":"all"}}`, name)
	if _, err := app.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+name, []byte(cfg)); err != nil {
		t.Fatalf("creating a push consumer (allowed; its delivery is what must fail): %v", err)
	}
	if _, err := app.Subscribe("orisun.events.default.injected", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, vio, "Subscription", "orisun.events.default.injected")
	// Neither reaches the stream: it stays at 20 messages over a window
	// in which either would have landed (both take milliseconds when
	// allowed).
	stays(t, ctx, js, name, 20, 2*time.Second)

	// The stream is intact: the same messages at the same sequences.
	after := readStream(t, ctx, js, 20)
	for seq, id := range before {
		if after[seq] != id {
			t.Fatalf("after the refused writes, sequence %d carries %q, before %q", seq, after[seq], id)
		}
	}
	// And the relay still publishes (I4).
	st := appendSettled(t, ctx, n, events(10, "access.test", 64), 30*time.Second)
	if b := st.Boundaries[0]; b.Head != 30 || b.StreamLast != 30 || b.StreamFirst != 1 {
		t.Fatalf("after new appends: head %d, stream %d..%d, want 30 and 1..30", b.Head, b.StreamFirst, b.StreamLast)
	}
	readStream(t, ctx, js, 30)

	// The application user's door is the API: the Go client appends,
	// reads and subscribes (catch-up, then live from the stream) with the
	// same credentials.
	c, err := client.Connect(n.NATSURL(), client.NATSOptions(append(append([]nats.Option{}, base...), creds...)...))
	if err != nil {
		t.Fatalf("client with the application's credentials: %v", err)
	}
	defer c.Close()
	res, err := c.Append(ctx, "default", events(5, "via.api", 32), nil)
	if err != nil || res.First != 31 || res.Last != 35 {
		t.Fatalf("append through the API as the application user: %+v %v", res, err)
	}
	page, err := c.Read(ctx, "default", 30, 10, nil)
	if err != nil || len(page.Events) != 5 {
		t.Fatalf("read through the API as the application user: %v (%d events)", err, len(page.Events))
	}
	sctx, scancel := context.WithCancel(ctx)
	got := make(chan uint64, 64)
	subDone := make(chan error, 1)
	go func() {
		subDone <- c.Subscribe(sctx, "default", 25, func(_ context.Context, e event.Event) error {
			got <- e.Position
			return nil
		}, client.SubscribeOptions{})
	}()
	for want := uint64(26); want <= 35; want++ {
		select {
		case p := <-got:
			if p != want {
				t.Fatalf("subscription as the application user delivered %d, want %d (I5)", p, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("subscription as the application user: no position %d", want)
		}
	}
	scancel()
	<-subDone
}

// refusedWrite runs a write attempt and waits for the server's permissions
// violation of a publish on subject, from a channel of
// natstest.Violations; the attempt itself must fail too (it gets no reply:
// the server dropped the request).
func refusedWrite(t *testing.T, ctx context.Context, vio <-chan error, subject string, attempt func(ctx context.Context) error) {
	t.Helper()
	actx, acancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- attempt(actx) }()
	if !natstest.Violated(vio, "Publish", subject, 20*time.Second) {
		acancel()
		t.Fatalf("no permissions violation for a publish to %s (attempt: %v)", subject, <-done)
	}
	acancel()
	if err := <-done; err == nil {
		t.Fatalf("write attempt on %s succeeded", subject)
	}
}

// readStream reads the event stream with an ordered consumer from sequence
// 1, as the application client, and checks that it holds exactly positions
// 1..want with sequence = position (I2) and a plain get of the last one
// works too. It returns the event id per sequence.
func readStream(t *testing.T, ctx context.Context, js jetstream.JetStream, want uint64) map[uint64]string {
	t.Helper()
	s, err := js.Stream(ctx, stream.Name("default"))
	if err != nil {
		t.Fatalf("stream info as the application client: %v", err)
	}
	if st := s.CachedInfo().State; st.FirstSeq != 1 || st.LastSeq != want || st.Msgs != want {
		t.Fatalf("stream holds %d..%d (%d messages), want 1..%d", st.FirstSeq, st.LastSeq, st.Msgs, want)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer as the application client: %v", err)
	}
	ids := map[uint64]string{}
	for seq := uint64(1); seq <= want; seq++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading sequence %d: %v", seq, err)
		}
		md, _ := msg.Metadata()
		pos, _ := strconv.ParseUint(msg.Headers().Get(stream.HeaderPosition), 10, 64)
		if md == nil || md.Sequence.Stream != seq || pos != seq {
			t.Fatalf("sequence %d carries position %d (I2)", seq, pos)
		}
		ids[seq] = msg.Headers().Get(stream.HeaderEventID)
	}
	raw, err := s.GetMsg(ctx, want)
	if err != nil {
		t.Fatalf("message get as the application client: %v", err)
	}
	if raw.Header.Get(stream.HeaderEventID) != ids[want] {
		t.Fatalf("get of %d: event %q, the consumer read %q", want, raw.Header.Get(stream.HeaderEventID), ids[want])
	}
	return ids
}

// waitForViolation waits for the server's permissions violation of op on
// subject.
func waitForViolation(t *testing.T, vio <-chan error, op, subject string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-vio:
			if strings.Contains(err.Error(), op) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %s on %s", op, subject)
		}
	}
}

// stays checks that the stream's last sequence stays at last for the whole
// window.
func stays(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, last uint64, window time.Duration) {
	t.Helper()
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		s := natstest.Stream(t, js, name)
		if got := s.CachedInfo().State.LastSeq; got != last {
			t.Fatalf("stream %s grew to sequence %d (was %d): something outside orisun wrote into it (I2)", name, got, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// purgeOf purges stream name through js: an attack for refusedWrite.
func purgeOf(js jetstream.JetStream, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	}
}

// deleteMsgOf deletes message seq of stream name through js: an attack for
// refusedWrite.
func deleteMsgOf(js jetstream.JetStream, name string, seq uint64) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		return s.DeleteMsg(ctx, seq)
	}
}
