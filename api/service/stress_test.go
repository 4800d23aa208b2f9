package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// slowBackend answers the boundary list after a while, so that Stop meets
// requests in flight; nothing else is asked.
type slowBackend struct{ service.Backend }

func (slowBackend) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	select {
	case <-time.After(5 * time.Millisecond):
		return []event.Boundary{{Name: "b"}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stressed is an API service under stress: the first Start that succeeds
// also sends requests, which Stop meets in flight.
type stressed struct {
	*service.Service
	nc, client *nats.Conn
	once       sync.Once
	requests   sync.WaitGroup
}

func (s *stressed) Start(ctx context.Context) error {
	if err := s.Service.Start(ctx); err != nil {
		return err
	}
	s.once.Do(func() {
		for range 4 {
			s.requests.Add(1)
			go func() {
				defer s.requests.Done()
				_, _ = s.client.Request("orisun.api.boundaries", nil, time.Second)
			}()
		}
	})
	return nil
}

// TestServiceStartStopStress: many goroutines start and stop API services
// serving requests at once. Once Stop returned the service's connection is
// closed, nobody answers on its subjects, and no goroutine is left (a
// handler's, the connection's).
func TestServiceStartStopStress(t *testing.T) {
	ns := natstest.Server(t, natsembed.Config{})
	client := natstest.Orisun(t, ns, "stress-client")
	startstoptest.Stress(t, func(t testing.TB) startstoptest.Part {
		nc := natstest.API(t, ns, "stress-api")
		return &stressed{Service: service.New(nc, slowBackend{}, service.Config{}), nc: nc, client: client}
	}, startstoptest.Options{
		Rounds: 20,
		Check: func(t testing.TB, p startstoptest.Part) {
			s := p.(*stressed)
			s.requests.Wait()
			if !s.nc.IsClosed() {
				t.Error("the service's connection is open after Stop")
			}
			if _, err := client.Request("orisun.api.boundaries", nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
				t.Errorf("a request after Stop: %v, want no responders", err)
			}
		},
	})
}
