package statushttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/status/statushttp"
)

// slow is a status source whose measurement takes a while, so that Stop
// meets measurements in flight.
type slow struct{}

func (slow) Status(ctx context.Context) (status.Status, error) {
	select {
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
	}
	return status.Status{Store: status.Health{OK: true}, NATS: status.Health{OK: true}}, nil
}

// listener is a status listener under stress: the first Start that
// succeeds also sends requests, which Stop meets in flight.
type listener struct {
	*statushttp.Server
	client   *http.Client
	once     sync.Once
	requests sync.WaitGroup
	addr     string
}

func (l *listener) Start(context.Context) error {
	if err := l.Server.Start(); err != nil {
		return err
	}
	l.once.Do(func() {
		l.addr = l.Addr()
		for _, path := range []string{"/status", "/readyz", "/metrics"} {
			l.requests.Add(1)
			go func() {
				defer l.requests.Done()
				resp, err := l.client.Get("http://" + l.addr + path)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	})
	return nil
}

// TestServerStartStopStress: many goroutines start and stop status
// listeners serving requests at once. Once Stop returned the address no
// longer answers, and no goroutine is left (the listener's, a
// measurement's).
func TestServerStartStopStress(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	startstoptest.Stress(t, func(testing.TB) startstoptest.Part {
		return &listener{Server: statushttp.NewServer(slow{}, statushttp.Options{Addr: "127.0.0.1:0"}), client: client}
	}, startstoptest.Options{
		Rounds: 30,
		Check: func(t testing.TB, p startstoptest.Part) {
			l := p.(*listener)
			l.requests.Wait()
			if l.addr == "" {
				return // stopped before it ever listened
			}
			if c, err := net.DialTimeout("tcp", l.addr, time.Second); err == nil {
				c.Close()
				t.Errorf("%s still accepts connections after Stop", l.addr)
			}
		},
	})
}
