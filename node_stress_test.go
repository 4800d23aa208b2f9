package orisun_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/startstop/startstoptest"
)

// stressNode is a node under stress: the first Start that succeeds also
// appends, subscribes and asks the status listener, so that Stop meets
// them in flight.
type stressNode struct {
	*orisun.Node
	client *http.Client
	once   sync.Once
	work   sync.WaitGroup
	subErr chan error // the subscription's end; empty when none began
	addr   string     // the status listener's, once started
}

func (s *stressNode) Start(ctx context.Context) error {
	if err := s.Node.Start(ctx); err != nil {
		return err
	}
	s.once.Do(func() {
		s.addr = s.HTTPAddr()
		s.work.Add(3)
		go func() {
			defer s.work.Done()
			in := []orisun.Input{{Type: "t", Data: json.RawMessage(`{}`)}}
			for range 20 {
				if _, err := s.Append(context.Background(), "default", in, nil); err != nil {
					return // ErrClosed once Stop began
				}
			}
		}()
		go func() {
			defer s.work.Done()
			s.subErr <- s.Subscribe(context.Background(), "default", 0,
				func(context.Context, orisun.Event) error { return nil }, orisun.SubscribeOptions{})
		}()
		go func() {
			defer s.work.Done()
			if resp, err := s.client.Get("http://" + s.addr + "/status"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	})
	return nil
}

// TestNodeStartStopStress: many goroutines start and stop nodes (SQLite in a
// temporary directory, an embedded NATS, the status listener), half of them
// started already, that append, subscribe and serve the status meanwhile. Start after Stop fails with
// ErrClosed, so does an append; a subscription ends with ErrClosed; the
// status listener no longer answers; no goroutine is left.
func TestNodeStartStopStress(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	round, served := 0, 0
	startstoptest.Stress(t, func(t testing.TB) startstoptest.Part {
		round++
		n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, HTTPAddr: "127.0.0.1:0",
			PollInterval: 20 * time.Millisecond, LeaseTTL: 2 * time.Second, Boundaries: []string{"default"}})
		if err != nil {
			t.Fatal(err)
		}
		sn := &stressNode{Node: n, client: client, subErr: make(chan error, 1)}
		if round%2 == 0 {
			// Stopped while it runs and serves.
			if err := sn.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		return sn
	}, startstoptest.Options{
		Rounds:  8,
		Workers: 4,
		Calls:   4,
		Stopped: func(err error) bool { return errors.Is(err, event.ErrClosed) },
		Check: func(t testing.TB, p startstoptest.Part) {
			n := p.(*stressNode)
			done := make(chan struct{})
			go func() { n.work.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("an append, a subscription or a status request still runs 10s after Stop")
			}
			select {
			case err := <-n.subErr:
				served++
				if !errors.Is(err, event.ErrClosed) {
					t.Errorf("subscription ended with %v, want ErrClosed", err)
				}
			default: // never started: Stop came first
			}
			if _, err := n.Append(context.Background(), "default", []orisun.Input{{Type: "t", Data: json.RawMessage(`{}`)}}, nil); !errors.Is(err, event.ErrClosed) {
				t.Errorf("append after Stop: %v, want ErrClosed", err)
			}
			if n.addr != "" {
				if c, err := net.DialTimeout("tcp", n.addr, time.Second); err == nil {
					c.Close()
					t.Errorf("the status listener %s still accepts connections after Stop", n.addr)
				}
			}
		},
	})
	if served < round/2 {
		t.Errorf("%d of %d rounds served a subscription, want at least the %d started before the stress", served, round, round/2)
	}
}
