package service_test

import (
	"testing"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// serve starts the service over be with cfg on an embedded NATS server of
// the test's own, on an API connection named name; it stops when the test
// ends.
func serve(t *testing.T, name string, be service.Backend, cfg service.Config) *natsembed.Server {
	t.Helper()
	ns := natstest.Server(t, natsembed.Config{})
	s, err := service.Start(natstest.API(t, ns, name), be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return ns
}

// goClient is a Go client of ns, closed when the test ends.
func goClient(t *testing.T, ns *natsembed.Server) *client.Client {
	t.Helper()
	c := natstest.Client(t, ns.ClientURL())
	return c
}
