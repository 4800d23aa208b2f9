// Package natstest is the NATS part of orisun's test scaffolding: a
// connection (and a Go client) closed with the test, a JetStream context, a
// stream and its info, a consumer's messages, the permissions violations a
// connection is told of. It is apart from package testutil, which needs
// nothing but the standard library. It is orisun's machinery, not for
// import by applications (being internal, it cannot be): its API may
// change without notice.
package natstest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orisun-io/orisun/client"
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
// (natsembed.Server.Connect), named name, with opts, and closes it when
// the test ends; it fails the test if it cannot connect.
func Orisun(t testing.TB, s *natsembed.Server, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(name, opts...)
	return opened(t, nc, err, name+" to the embedded server as orisun")
}

// Node is an orisun node (orisun.Node) as NodeConn uses it.
type Node interface {
	ConnectNATS(name string) (*nats.Conn, error)
}

// NodeConn opens a connection to n's NATS server as orisun itself
// (Node.ConnectNATS), named name, and closes it when the test ends; it
// fails the test if it cannot connect.
func NodeConn(t testing.TB, n Node, name string) *nats.Conn {
	t.Helper()
	nc, err := n.ConnectNATS(name)
	return opened(t, nc, err, name+" to the node's NATS server as orisun")
}

// API opens an in-process connection to s as the API service
// (natsembed.Server.ConnectAPI), named name, with opts, and closes it when
// the test ends; it fails the test if it cannot connect.
func API(t testing.TB, s *natsembed.Server, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := s.ConnectAPI(name, opts...)
	return opened(t, nc, err, name+" to the embedded server as the API")
}

// Client connects a Go client (package client) to the node at url with
// opts and closes it when the test ends; it fails the test if it cannot
// connect.
func Client(t testing.TB, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect a client to %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
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

// Stream returns the stream name of js, failing the test if it cannot.
func Stream(t testing.TB, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s
}

// Info returns s's info as the server has it now (not the cached one),
// failing the test if it cannot.
func Info(t testing.TB, s jetstream.Stream) *jetstream.StreamInfo {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info
}

// Messages reads cons (an ordered consumer, say) with one iterator,
// stopped when the test ends; it fails the test if it cannot.
func Messages(t testing.TB, cons jetstream.Consumer) jetstream.MessagesContext {
	t.Helper()
	it, err := cons.Messages()
	if err != nil {
		t.Fatalf("consumer messages: %v", err)
	}
	t.Cleanup(it.Stop)
	return it
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
	if !Violated(ch, op, subject, 10*time.Second) {
		t.Fatalf("no permissions violation for %s %q", op, subject)
	}
}

// Violated waits up to timeout for a permissions violation of op
// ("Publish", "Subscription") to subject (the server says `Publish to
// "subject"`), from a channel of Violations, and says whether one came;
// the others it drops.
func Violated(ch <-chan error, op, subject string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		select {
		case err := <-ch:
			if strings.Contains(err.Error(), op+` to "`+subject+`"`) {
				return true
			}
		case <-deadline:
			return false
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
