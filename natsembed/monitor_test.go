package natsembed_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// TestMonitor: with Monitor set, the server's own monitoring endpoint
// answers on loopback (an empty host) what prometheus-nats-exporter and
// nats-top read: /varz with the server's name and JetStream on, /jsz
// counting the streams and messages the server holds (startWithStream's
// one stream of three messages); without it there is no endpoint.
func TestMonitor(t *testing.T) {
	t.Parallel()
	s, _ := startWithStream(t, natsembed.Config{ServerName: "monitored", Monitor: &natsembed.Monitor{Port: -1}})
	base := s.MonitorURL()
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("MonitorURL = %q, want loopback", base)
	}
	var varz struct {
		ServerName string `json:"server_name"`
		JetStream  struct {
			Config *struct {
				StoreDir string `json:"store_dir"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	getJSON(t, base+"/varz", &varz)
	if varz.ServerName != "monitored" || varz.JetStream.Config == nil {
		t.Fatalf("/varz: server_name %q, jetstream config %v; want monitored with JetStream on", varz.ServerName, varz.JetStream.Config)
	}

	var jsz struct {
		Streams  int    `json:"streams"`
		Messages uint64 `json:"messages"`
	}
	getJSON(t, base+"/jsz", &jsz)
	if jsz.Streams != 1 || jsz.Messages != 3 {
		t.Fatalf("/jsz: %d streams, %d messages; want 1 and 3", jsz.Streams, jsz.Messages)
	}

	off := natstest.Server(t, natsembed.Config{})
	if u := off.MonitorURL(); u != "" {
		t.Fatalf("MonitorURL without Monitor = %q, want none", u)
	}
}

// TestMonitorPortInUse: a monitor port that is taken fails Start, saying
// so, rather than running without the monitoring that was asked for.
func TestMonitorPortInUse(t *testing.T) {
	t.Parallel()
	startRefused(t, natsembed.Config{Port: -1, StoreDir: t.TempDir(), ReadyTimeout: 30 * time.Second,
		Monitor: &natsembed.Monitor{Port: testutil.TakenPort(t)}}, "its monitor port in use", "monitor port")
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", url, resp.StatusCode, body, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}
