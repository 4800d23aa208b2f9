package service_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// goroutineBackend answers the boundary list with nothing and records the
// goroutine that asked.
type goroutineBackend struct {
	service.Backend
	ids chan string
}

func (b goroutineBackend) Boundaries(context.Context) ([]event.Boundary, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	b.ids <- string(id)
	return nil, nil
}

// TestRequestGoroutinesKept: requests one after the other run on the same
// goroutine, which keeps the stack it grew (a new goroutine per request grew
// one each time, issue 22); and Stop ends the idle ones (the leak check of
// TestMain fails otherwise).
func TestRequestGoroutinesKept(t *testing.T) {
	ns := natstest.Server(t, natsembed.Config{})
	nc := natstest.API(t, ns, "worker-api")
	be := goroutineBackend{ids: make(chan string, 100)}
	s, err := service.Start(nc, be, service.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client := natstest.Connect(t, ns.ClientURL(), nats.Name("worker-client"))
	seen := map[string]bool{}
	for range 50 {
		if _, err := client.Request("orisun.api.boundaries", nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		seen[<-be.ids] = true
	}
	// One goroutine serves them all, or two when one went idle for a
	// second on a slow machine.
	if len(seen) > 2 {
		t.Fatalf("50 requests in a row ran on %d goroutines", len(seen))
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
