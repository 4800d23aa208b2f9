// Package natstest is the NATS part of orisun's test scaffolding: a
// connection closed with the test, a JetStream context, the permissions
// violations a connection is told of. It is apart from package testutil,
// which needs nothing but the standard library. It is orisun's machinery,
// not for import by applications (being internal, it cannot be): its API
// may change without notice.
package natstest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orisun-io/orisun/natsembed"
)

// Connect connects to url with opts and closes the connection when the
// test ends; it fails the test if it cannot connect.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	return opened(t, nc, err, "to "+url)
}

// Orisun opens an in-process connection to s as orisun itself
// (natsembed.Server.Connect), named name, and closes it when the test
// ends; it fails the test if it cannot connect.
func Orisun(t testing.TB, s *natsembed.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(name)
	return opened(t, nc, err, name+" to the embedded server as orisun")
}

// API opens an in-process connection to s as the API service
// (natsembed.Server.ConnectAPI), named name, and closes it when the test
// ends; it fails the test if it cannot connect.
func API(t testing.TB, s *natsembed.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := s.ConnectAPI(name)
	return opened(t, nc, err, name+" to the embedded server as the API")
}

// opened returns nc, to be closed when the test ends, or fails the test
// when the connection (connect what) failed with err.
func opened(t testing.TB, nc *nats.Conn, err error, what string) *nats.Conn {
	t.Helper()
	if err != nil {
		t.Fatalf("connect %s: %v", what, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns the JetStream context of nc, failing the test if it
// cannot be made.
func JetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Violations is a connection option that collects the connection's
// permissions violations (the server tells of them asynchronously), and
// the channel they arrive on.
func Violations() (nats.Option, <-chan error) {
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

// WaitViolation waits up to 10 s for a permissions violation of op
// ("Publish", "Subscription") naming subject, from a channel of
// Violations, and fails the test if none comes.
func WaitViolation(t testing.TB, ch <-chan error, op, subject string) {
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

// Server starts an embedded NATS server with cfg (orisun's configuration,
// its permission model on, for a zero Config) on a random port, with a
// store directory of the test's, and stops it when the test ends.
func Server(t testing.TB, cfg natsembed.Config) *natsembed.Server {
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

// Refused checks that a connection to url with opts is refused with an
// authorization violation (the server's "Authorization Violation", whether
// or not the client names it nats.ErrAuthorization); what names the
// attempt in the test's failure.
func Refused(t testing.TB, url, what string, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, append(slices.Clone(opts), nats.MaxReconnects(0))...)
	if err == nil {
		nc.Close()
		t.Fatalf("%s: connected", what)
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("%s: %v, want an authorization violation", what, err)
	}
}
