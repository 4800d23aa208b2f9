package natsembed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/internal/testcert"
	"github.com/orisun-io/orisun/natsembed"
)

// startServer starts an embedded server with cfg on a random port and a
// store directory of the test's, and stops it when the test ends.
func startServer(t *testing.T, cfg natsembed.Config) *natsembed.Server {
	t.Helper()
	cfg.Port = -1
	cfg.StoreDir = t.TempDir()
	s, err := natsembed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// violations collects the connection's asynchronous permission errors.
func violations() (nats.Option, <-chan error) {
	ch := make(chan error, 64)
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case ch <- err:
			default:
			}
		}
	}), ch
}

// waitViolation waits for a permissions violation naming subject.
func waitViolation(t *testing.T, ch <-chan error, op, subject string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-ch:
			if strings.Contains(err.Error(), `"`+subject+`"`) && strings.Contains(err.Error(), op) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %s %q", op, subject)
		}
	}
}

// TestAuthRefusesStrangers_S13: with a user and password, a client without
// credentials and one with a wrong password cannot connect; the right ones
// can; orisun's own in-process connection can.
func TestAuthRefusesStrangers_S13(t *testing.T) {
	s := startServer(t, natsembed.Config{Auth: &natsembed.Auth{User: "app", Password: "s3cret-pass"}})
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
		nc, err := nats.Connect(s.ClientURL(), append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("%s: %v, want an authorization violation", name, err)
		}
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

// TestAppUserPermissions_S13: the application user can make API requests
// (answered by orisun's own connection), but cannot publish into the event
// subjects, answer on orisun.api.> in orisun's place, subscribe to the
// event subjects, or publish to orisun's inboxes; the API's own connection
// cannot publish where a forged reply subject would point it.
func TestAppUserPermissions_S13(t *testing.T) {
	s := startServer(t, natsembed.Config{Auth: &natsembed.Auth{Token: "tok-123456"}})
	in, err := s.Connect("orisun")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	// orisun's connection answers API requests and can publish events.
	if _, err := in.Subscribe("orisun.api.>", func(m *nats.Msg) { m.Respond([]byte(`{"ok":true}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := in.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := in.Publish("orisun.events.default.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	errOpt, vio := violations()
	apiVio := make(chan error, 16)
	app, err := nats.Connect(s.ClientURL(), nats.Token("tok-123456"), errOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := app.RequestWithContext(ctx, "orisun.api.status", []byte(`{}`))
	if err != nil || string(reply.Data) != `{"ok":true}` {
		t.Fatalf("API request as the application user: %v %v", reply, err)
	}

	if err := app.Publish("orisun.events.default.x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitViolation(t, vio, "Publish", "orisun.events.default.x")

	if _, err := app.Subscribe("orisun.api.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	waitViolation(t, vio, "Subscription", "orisun.api.>")

	// A core subscription on the event subjects is refused: it would give
	// a push consumer delivering into another boundary's subjects the
	// interest it needs to write into that stream. Applications read
	// through JetStream consumers, which deliver to their _INBOX.
	if _, err := app.Subscribe("orisun.events.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	waitViolation(t, vio, "Subscription", "orisun.events.>")

	// The API's connection answers on the caller's reply subject, but not
	// into the event subjects, JetStream's API or orisun's inboxes.
	api, err := s.ConnectAPI("orisun-api", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case apiVio <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	for _, subject := range []string{"orisun.events.default.forged", "$JS.API.STREAM.PURGE.ORISUN_default", natsembed.InternalInboxPrefix + ".x"} {
		if err := api.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		waitViolation(t, apiVio, "Publish", subject)
	}
	// The application cannot reach orisun's inboxes either.
	if err := app.Publish(natsembed.InternalInboxPrefix+".x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitViolation(t, vio, "Publish", natsembed.InternalInboxPrefix+".x")
}

// TestTLS_S13: with TLS on, a client trusting the CA connects over TLS, a
// plain one is refused, and the in-process connection needs no TLS. With a
// CA for client certificates, a client without one is refused.
func TestTLS_S13(t *testing.T) {
	certs := testcert.Write(t, t.TempDir())
	s := startServer(t, natsembed.Config{TLS: &natsembed.TLS{CertFile: certs.Cert, KeyFile: certs.Key}})
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

	mtls := startServer(t, natsembed.Config{
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
		"cert without key":      {TLS: &natsembed.TLS{CertFile: "/nonexistent.pem"}},
		"unreadable cert":       {TLS: &natsembed.TLS{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}},
	} {
		cfg.StoreDir = t.TempDir()
		if _, err := natsembed.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
