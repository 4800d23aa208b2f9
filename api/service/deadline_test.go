package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// hangingBackend answers the boundary list only when the request's context
// ends, and says whether it ended with the service's own deadline.
type hangingBackend struct {
	service.Backend
	own chan bool
}

func (b hangingBackend) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	<-ctx.Done()
	b.own <- serviceutil.OwnDeadline(ctx)
	return nil, ctx.Err()
}

// TestRequestTimeoutIsOwnDeadline: the service's RequestTimeout is a
// deadline of its own (serviceutil.WithTimeout): the node counts a store
// that outlives it as failing, where a caller's own deadline in process is
// the caller's answer (docs/operations.md, "When the store fails").
func TestRequestTimeoutIsOwnDeadline(t *testing.T) {
	be := hangingBackend{own: make(chan bool, 1)}
	ns := serve(t, "deadline-api", be, service.Config{RequestTimeout: 50 * time.Millisecond})
	// An application's connection: its inbox is an ordinary one.
	client := natstest.Connect(t, ns.ClientURL(), nats.Name("deadline-client"))
	if _, err := client.Request("orisun.api.boundaries", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case own := <-be.own:
		if !own {
			t.Fatal("the request's context ended without the service's own deadline as its cause")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's request never ended")
	}
}
