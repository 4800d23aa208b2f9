package statushttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/status/statushttp"
)

type fixed struct {
	st  status.Status
	err error
}

func (f *fixed) Status(context.Context) (status.Status, error) { return f.st, f.err }

func TestReady(t *testing.T) {
	now := time.Now()
	ok := status.Status{Store: status.Health{OK: true}, NATS: status.Health{OK: true}, Boundaries: []status.BoundaryStatus{
		{Name: "a", State: status.StateLeading, Since: now.Add(-time.Hour)},
		{Name: "b", State: status.StateStalled, Since: now.Add(-10 * time.Second), Reason: "read boundary: boom"},
		{Name: "c", State: status.StatePaused, Since: now.Add(-time.Hour)},
	}}
	if r := status.Ready(ok, 30*time.Second, now); !r.Ready {
		t.Fatalf("a stall younger than the threshold is still ready: %+v", r)
	}
	r := status.Ready(ok, 5*time.Second, now)
	if r.Ready || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], "boundary b") || !strings.Contains(r.Reasons[0], "boom") {
		t.Fatalf("a stall past the threshold: %+v", r)
	}
	down := ok
	down.Store = status.Health{Error: "dial tcp: refused"}
	down.NATS = status.Health{Error: "timeout"}
	r = status.Ready(down, time.Hour, now)
	if r.Ready || len(r.Reasons) != 2 || !strings.Contains(r.Reasons[0], "refused") || !strings.Contains(r.Reasons[1], "timeout") {
		t.Fatalf("store and NATS down: %+v", r)
	}
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	return getHost(t, addr, "", path)
}

// getHost is get with the request's Host header set to host ("": addr).
func getHost(t *testing.T, addr, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerLifecycle: a taken address fails Start with the variable's
// name; a measurement error is a 503, never a 200; Stopping turns /readyz
// to 503 while /healthz stays up; Stop is safe twice and before Start.
func TestServerLifecycle(t *testing.T) {
	if err := statushttp.NewServer(&fixed{}, statushttp.Options{}).Stop(); err != nil {
		t.Fatal(err)
	}
	taken := fmt.Sprintf("127.0.0.1:%d", testutil.TakenPort(t))
	if err := statushttp.NewServer(&fixed{}, statushttp.Options{Addr: taken}).Start(); err == nil || !strings.Contains(err.Error(), "ORISUN_HTTP_ADDR") {
		t.Fatalf("taken address: %v", err)
	}

	src := &fixed{st: status.Status{Store: status.Health{OK: true}, NATS: status.Health{OK: true}, Settled: true}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: "127.0.0.1:0"})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, s.Addr(), "/readyz"); code != 200 || !strings.Contains(body, `"ready": true`) {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	src.err = errors.New("node not running")
	if code, body := get(t, s.Addr(), "/status"); code != 503 || !strings.Contains(body, "node not running") {
		t.Fatalf("/status with a failed measurement: %d %s", code, body)
	}
	if code, body := get(t, s.Addr(), "/metrics"); code != 200 || !strings.Contains(body, "orisun_status_scrape_error 1") {
		t.Fatalf("/metrics with a failed measurement: %d %s", code, body)
	}
	src.err = nil
	s.Stopping()
	if code, body := get(t, s.Addr(), "/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz while stopping: %d %s", code, body)
	}
	if code, _ := get(t, s.Addr(), "/healthz"); code != 200 {
		t.Fatalf("/healthz while stopping: %d", code)
	}
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("still listening after Stop")
	}
}

// TestMetricsHelpSaysWhatSetsThem: orisun_store_up and orisun_settled are
// the status's store.ok and settled, which a failing kind of store work
// turns off while the store still answers the scrape's reads: their help
// says so (docs/operations.md, "Metrics"), and a store that answers but
// fails appends is 0 in both.
func TestMetricsHelpSaysWhatSetsThem(t *testing.T) {
	src := &fixed{st: status.Status{NATS: status.Health{OK: true},
		Store: status.Health{Kind: "sqlite", Error: "appends fail since 2026-01-01T00:00:00Z (append): database or disk is full"}}}
	s := statushttp.NewServer(src, statushttp.Options{Addr: "127.0.0.1:0"})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	_, body := get(t, s.Addr(), "/metrics")
	for _, want := range []string{
		`orisun_store_up{backend="sqlite"} 0`,
		`orisun_settled 0`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics with appends failing lacks %s:\n%s", want, body)
		}
	}
	for metric, words := range map[string][]string{
		"orisun_store_up": {"answered during this scrape", "no kind of store work is failing", "store.ok"},
		"orisun_settled":  {"published position equals its head", "every figure was measured", "store's work is not failing"},
	} {
		var help string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "# HELP "+metric+" ") {
				help = line
			}
		}
		for _, w := range words {
			if !strings.Contains(help, w) {
				t.Errorf("the help of %s does not say %q: %q", metric, w, help)
			}
		}
	}
}
