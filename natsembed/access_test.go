package natsembed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testcert"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// TestAuthRefusesStrangers_S13: with a user and password, a client without
// credentials and one with a wrong password cannot connect; the right ones
// can; orisun's own in-process connection can.
func TestAuthRefusesStrangers_S13(t *testing.T) {
	s := natstest.Server(t, natsembed.Config{Auth: &natsembed.Auth{User: "app", Password: "s3cret-pass"}})
	for name, opts := range map[string][]nats.Option{
		"no credentials": nil,
		"wrong password": {nats.UserInfo("app", "wrong")},
		"unknown user":   {nats.UserInfo("other", "s3cret-pass")},
		"a token":        {nats.Token("s3cret-pass")},
		// The internal user exists, but only in process: over TCP even
		// the right password would not do; a guessed one certainly not.
		"internal user over TCP": {nats.UserInfo(natsembed.InternalUser, "guess")},
		"API user over TCP":      {nats.UserInfo(natsembed.APIUser, "guess")},
	} {
		natstest.Refused(t, s.ClientURL(), name, opts...)
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("app", "s3cret-pass"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	in, err := s.Connect("orisun")
	if err != nil {
		t.Fatalf("in-process connection: %v", err)
	}
	in.Close()
}

// TestNoCredentialsIsTheApplication_S13: without Auth the permission model
// is still on: a TCP client without credentials connects, and so does one
// with credentials the server does not know (ignored, as by a NATS server
// without authorization), both as the application principal; orisun's own
// user names are refused over TCP; the in-process connections work.
func TestNoCredentialsIsTheApplication_S13(t *testing.T) {
	s := natstest.Server(t, natsembed.Config{})
	for name, opts := range map[string][]nats.Option{
		"no credentials":      nil,
		"unknown credentials": {nats.UserInfo("someone", "something")},
		"a token":             {nats.Token("whatever")},
	} {
		nc, err := nats.Connect(s.ClientURL(), append(opts, nats.MaxReconnects(0))...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nc.Close()
	}
	for name, opts := range map[string][]nats.Option{
		"internal user over TCP": {nats.UserInfo(natsembed.InternalUser, "guess")},
		"API user over TCP":      {nats.UserInfo(natsembed.APIUser, "guess")},
	} {
		natstest.Refused(t, s.ClientURL(), name, opts...)
	}
	for _, connect := range []func(string, ...nats.Option) (*nats.Conn, error){s.Connect, s.ConnectAPI} {
		in, err := connect("orisun")
		if err != nil {
			t.Fatalf("in-process connection: %v", err)
		}
		in.Close()
	}
}

// TestAppUserPermissions_S13: the application principal, authenticated
// (a token) or, without Auth, a client without credentials, can make API
// requests (answered by orisun's own connection), discover the service and
// call JetStream's read API, but cannot publish into the event subjects,
// change streams, run JetStream's cluster operations, answer on
// orisun.api.> or $SRV.> in orisun's place (plainly or in a queue group),
// subscribe to the event subjects, or publish to orisun's inboxes; the
// API's own connection cannot publish where a forged reply subject would
// point it.
func TestAppUserPermissions_S13(t *testing.T) {
	for _, mode := range []struct {
		name string
		auth *natsembed.Auth
		opts []nats.Option
	}{
		{"token", &natsembed.Auth{Token: "tok-123456"}, []nats.Option{nats.Token("tok-123456")}},
		{"no credentials", nil, nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			checkAppPermissions(t, natstest.Server(t, natsembed.Config{Auth: mode.auth}), mode.opts)
		})
	}
}

func checkAppPermissions(t *testing.T, s *natsembed.Server, creds []nats.Option) {
	in := natstest.Orisun(t, s, "orisun")
	// orisun's connection answers API requests and discovery, and can
	// publish events.
	for _, subject := range []string{"orisun.api.>", "$SRV.PING"} {
		if _, err := in.Subscribe(subject, func(m *nats.Msg) { m.Respond([]byte(`{"ok":true}`)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := in.Publish("orisun.events.default.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	errOpt, vio := natstest.Violations()
	apiVio := make(chan error, 16)
	app := natstest.Connect(t, s.ClientURL(), append(creds, errOpt)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, subject := range []string{"orisun.api.status", "$SRV.PING"} {
		reply, err := app.RequestWithContext(ctx, subject, []byte(`{}`))
		if err != nil || string(reply.Data) != `{"ok":true}` {
			t.Fatalf("request on %s as the application: %v %v", subject, reply, err)
		}
	}
	// JetStream's read API answers.
	if _, err := app.RequestWithContext(ctx, "$JS.API.INFO", nil); err != nil {
		t.Fatalf("$JS.API.INFO as the application: %v", err)
	}

	for _, subject := range []string{
		"orisun.events.default.x",
		"$JS.API.STREAM.CREATE.SHADOW",
		"$JS.API.STREAM.UPDATE.ORISUN_default",
		"$JS.API.STREAM.DELETE.ORISUN_default",
		"$JS.API.STREAM.PURGE.ORISUN_default",
		"$JS.API.STREAM.MSG.DELETE.ORISUN_default",
		"$JS.API.STREAM.SNAPSHOT.ORISUN_default",
		"$JS.API.STREAM.RESTORE.ORISUN_default",
		"$JS.API.STREAM.LEADER.STEPDOWN.ORISUN_default",
		"$JS.API.STREAM.PEER.REMOVE.ORISUN_default",
		"$JS.API.CONSUMER.LEADER.STEPDOWN.ORISUN_default.c",
		"$JS.API.CONSUMER.PEER.REMOVE.ORISUN_default.c",
		"$JS.API.META.LEADER.STEPDOWN",
		"$JS.API.ACCOUNT.PURGE.x",
		"$JS.API.SERVER.REMOVE",
		natsembed.InternalInboxPrefix + ".x",
	} {
		if err := app.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		natstest.WaitViolation(t, vio, "Publish", subject)
	}

	// Nobody but orisun answers the API or discovery, alone or in the
	// service's queue group. And no core subscription on the event
	// subjects: it would give a push consumer delivering into another
	// boundary's subjects the interest it needs to write into that stream
	// (TestPushConsumerWritesWhereItDelivers). Applications read through
	// JetStream consumers, which deliver to their _INBOX.
	for _, sub := range []struct{ subject, queue string }{
		{"orisun.api.>", ""},
		{"orisun.api.append.*", "q"},
		{"$SRV.PING", ""},
		{"$SRV.>", ""},
		{"orisun.events.>", ""},
		{"orisun.events.default.>", ""},
		{"orisun.events.default.x", ""},
		{">", ""},
	} {
		var err error
		if sub.queue != "" {
			_, err = app.QueueSubscribe(sub.subject, sub.queue, func(*nats.Msg) {})
		} else {
			_, err = app.Subscribe(sub.subject, func(*nats.Msg) {})
		}
		if err != nil {
			t.Fatal(err)
		}
		natstest.WaitViolation(t, vio, "Subscription", sub.subject)
	}

	// The API's connection answers on the caller's reply subject, but not
	// into the event subjects, JetStream's API or orisun's inboxes.
	api := natstest.API(t, s, "orisun-api", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case apiVio <- err:
		default:
		}
	}))
	for _, subject := range []string{"orisun.events.default.forged", "$JS.API.STREAM.PURGE.ORISUN_default", natsembed.InternalInboxPrefix + ".x"} {
		if err := api.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		natstest.WaitViolation(t, apiVio, "Publish", subject)
	}
}

// TestPushConsumerWritesWhereItDelivers: why the application may not
// subscribe to the event subjects even to read. JetStream lets a push
// consumer of one stream deliver into another stream's subjects (its cycle
// check covers the consumer's own stream only); the consumer delivers as
// soon as a subscription on exactly its deliver subject exists, and the
// other stream stores what it delivers, here its idle heartbeats. A
// wildcard subscription gives it no interest, but a subscription
// permission cannot tell orisun.events.b.> from orisun.events.b.x. The
// literal subscription here is orisun's own (the application's is
// refused, TestAppUserPermissions_S13); if this test ever fails, NATS has
// closed the hole, and the subscription could be allowed.
func TestPushConsumerWritesWhereItDelivers(t *testing.T) {
	s := natstest.Server(t, natsembed.Config{})
	in := natstest.Orisun(t, s, "orisun")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t, in)
	for _, b := range []string{"a", "b"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORISUN_" + b, Subjects: []string{"orisun.events." + b + ".>"},
			Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatal(err)
		}
	}
	app := natstest.Connect(t, s.ClientURL())
	ajs := natstest.JetStream(t, app)
	// The application may create it: consumer creation cannot look into
	// the request's deliver subject.
	if _, err := ajs.CreateOrUpdateConsumer(ctx, "ORISUN_a", jetstream.ConsumerConfig{Name: "relay",
		DeliverSubject: "orisun.events.b.relay", AckPolicy: jetstream.AckNonePolicy,
		IdleHeartbeat: 100 * time.Millisecond}); err != nil {
		t.Fatalf("creating the push consumer as the application: %v", err)
	}
	b := natstest.Stream(t, js, "ORISUN_b")
	msgs := func() uint64 {
		return natstest.Info(t, b).State.Msgs
	}
	// A wildcard subscription over b's subjects: no interest, nothing sent.
	wild, err := in.Subscribe("orisun.events.b.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := msgs(); n != 0 {
		t.Fatalf("ORISUN_b holds %d messages with only a wildcard subscription, want 0", n)
	}
	wild.Unsubscribe()
	// The literal one: the heartbeats land in ORISUN_b.
	if _, err := in.Subscribe("orisun.events.b.relay", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the push consumer's heartbeats to be stored in ORISUN_b", 10*time.Second, 50*time.Millisecond,
		func() bool { return msgs() > 0 })
}

// TestTLS_S13: with TLS on, a client trusting the CA connects over TLS, a
// plain one is refused, and the in-process connection needs no TLS. With a
// CA for client certificates, a client without one is refused.
func TestTLS_S13(t *testing.T) {
	certs := testcert.Write(t, t.TempDir())
	s := natstest.Server(t, natsembed.Config{TLS: &natsembed.TLS{CertFile: certs.Cert, KeyFile: certs.Key}})
	if !strings.HasPrefix(s.ClientURL(), "tls://127.0.0.1:") {
		t.Fatalf("URL %s, want tls:// on loopback", s.ClientURL())
	}
	nc, err := nats.Connect(s.ClientURL(), nats.RootCAs(certs.CA), nats.Secure())
	if err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("not a TLS connection: %v", err)
	}
	nc.Close()
	plain, err := nats.Connect(strings.Replace(s.ClientURL(), "tls://", "nats://", 1), nats.MaxReconnects(0))
	if err == nil {
		plain.Close()
		t.Fatal("plain client connected to a TLS server")
	}
	in, err := s.Connect("orisun")
	if err != nil {
		t.Fatalf("in-process connection with TLS on: %v", err)
	}
	in.Close()

	mtls := natstest.Server(t, natsembed.Config{
		TLS:  &natsembed.TLS{CertFile: certs.Cert, KeyFile: certs.Key, CAFile: certs.CA},
		Auth: &natsembed.Auth{User: "app", Password: "pw-123456"},
	})
	if nc, err := nats.Connect(mtls.ClientURL(), nats.RootCAs(certs.CA), nats.UserInfo("app", "pw-123456"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("client without a certificate connected to a server that requires one")
	}
	nc, err = nats.Connect(mtls.ClientURL(), nats.RootCAs(certs.CA), nats.ClientCert(certs.ClientCert, certs.ClientKey),
		nats.UserInfo("app", "pw-123456"))
	if err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	nc.Close()
	in, err = mtls.Connect("orisun")
	if err != nil {
		t.Fatalf("in-process connection with client certificates required: %v", err)
	}
	in.Close()
}

// TestAccessConfigRefused: inconsistent settings fail at New.
func TestAccessConfigRefused(t *testing.T) {
	for name, cfg := range map[string]natsembed.Config{
		"user without password": {Auth: &natsembed.Auth{User: "app"}},
		"token and user":        {Auth: &natsembed.Auth{User: "app", Password: "x", Token: "y"}},
		"empty auth":            {Auth: &natsembed.Auth{}},
		"internal name":         {Auth: &natsembed.Auth{User: natsembed.InternalUser, Password: "x"}},
		"anonymous name":        {Auth: &natsembed.Auth{User: natsembed.AnonymousUser, Password: "x"}},
		"admin is the app":      {Auth: &natsembed.Auth{User: "app", Password: "x"}, Admin: &natsembed.Auth{User: "app", Password: "y"}},
		"admin token is app's":  {Auth: &natsembed.Auth{Token: "t"}, Admin: &natsembed.Auth{Token: "t"}},
		"admin incomplete":      {Admin: &natsembed.Auth{User: "admin"}},
		"negative memory":       {MaxMemory: -1},
		"cert without key":      {TLS: &natsembed.TLS{CertFile: "/nonexistent.pem"}},
		"unreadable cert":       {TLS: &natsembed.TLS{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}},
	} {
		cfg.StoreDir = t.TempDir()
		if _, err := natsembed.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestBoundaryCreationIsTheAdmins_S13: every boundary's stream reserves
// JetStream memory, so orisun.api.boundaries.create is the admin's. With no
// credentials configured every client may create boundaries (the
// zero-configuration path); with the application's credentials and no
// admin, nobody over NATS; with an admin, the admin only. Wrong admin
// credentials are refused at connect, never taken for no credentials. The
// other API requests stay the application's.
func TestBoundaryCreationIsTheAdmins_S13(t *testing.T) {
	const create = "orisun.api.boundaries.create"
	app := &natsembed.Auth{User: "app", Password: "app-pass"}
	admin := &natsembed.Auth{User: "admin", Password: "admin-pass"}
	adminToken := &natsembed.Auth{Token: "admin-token-1"}
	for _, mode := range []struct {
		name       string
		cfg        natsembed.Config
		may, mayNo [][]nats.Option // clients that may create, and that may not
		refused    [][]nats.Option // clients refused at connect
	}{
		{name: "no credentials", may: [][]nats.Option{nil, {nats.UserInfo("someone", "x")}}},
		{name: "application only", cfg: natsembed.Config{Auth: app},
			mayNo: [][]nats.Option{{nats.UserInfo("app", "app-pass")}}},
		{name: "application and admin", cfg: natsembed.Config{Auth: app, Admin: admin},
			may:     [][]nats.Option{{nats.UserInfo("admin", "admin-pass")}},
			mayNo:   [][]nats.Option{{nats.UserInfo("app", "app-pass")}},
			refused: [][]nats.Option{nil, {nats.UserInfo("admin", "app-pass")}}},
		{name: "admin token only", cfg: natsembed.Config{Admin: adminToken},
			may:     [][]nats.Option{{nats.Token("admin-token-1")}},
			mayNo:   [][]nats.Option{nil, {nats.UserInfo("someone", "x")}},
			refused: [][]nats.Option{{nats.Token("admin-token-2")}}},
		{name: "admin user only", cfg: natsembed.Config{Admin: admin},
			may:     [][]nats.Option{{nats.UserInfo("admin", "admin-pass")}},
			mayNo:   [][]nats.Option{nil},
			refused: [][]nats.Option{{nats.UserInfo("admin", "wrong")}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Server(t, mode.cfg)
			in := natstest.Orisun(t, s, "orisun")
			if _, err := in.Subscribe("orisun.api.>", func(m *nats.Msg) { m.Respond([]byte(`{"ok":true}`)) }); err != nil {
				t.Fatal(err)
			}
			if err := in.Flush(); err != nil {
				t.Fatal(err)
			}
			request := func(creds []nats.Option, subject string) (*nats.Conn, <-chan error, error) {
				errOpt, vio := natstest.Violations()
				nc, err := nats.Connect(s.ClientURL(), append(append([]nats.Option{}, creds...), errOpt, nats.MaxReconnects(0))...)
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				t.Cleanup(nc.Close)
				_, err = nc.Request(subject, []byte(`{"name":"x"}`), 2*time.Second)
				return nc, vio, err
			}
			for _, creds := range mode.may {
				if _, _, err := request(creds, create); err != nil {
					t.Errorf("a client that may create boundaries: %v", err)
				}
			}
			for _, creds := range mode.mayNo {
				_, vio, err := request(creds, create)
				if err == nil {
					t.Fatal("a client that may not create boundaries was answered")
				}
				natstest.WaitViolation(t, vio, "Publish", create)
				if _, _, err := request(creds, "orisun.api.boundaries"); err != nil {
					t.Errorf("the same client listing the boundaries: %v", err)
				}
			}
			for _, creds := range mode.refused {
				natstest.Refused(t, s.ClientURL(), "a client with wrong admin credentials", creds...)
			}
		})
	}
}
