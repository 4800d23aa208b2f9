package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// natsCLIBinary is the nats CLI from tools/natscli (natscli v0.5.0, a
// module of its own so that it stays out of orisun's go.mod).
var natsCLIBinary = testutil.Binary{Pkg: "github.com/nats-io/natscli/nats", Module: "tools/natscli"}

// natsCLI runs the nats CLI against url with a home of its own (no saved
// contexts of the machine interfere) and returns its standard output. The
// timeout is short because `nats micro ls` waits all of it for answers.
func natsCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testutil.Build(t, natsCLIBinary), append([]string{"--server", url, "--timeout", "3s"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nats %s: %v\nstdout %s\nstderr %s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// TestWithTheNATSCLI drives the API and the stream layout with nothing but
// the real nats CLI (v0.5.0): append and read by request/reply, the service
// seen by `nats micro`, and stream messages read by sequence, whose
// sequence is their position (I2).
func TestWithTheNATSCLI(t *testing.T) {
	t.Parallel()
	n, _ := setup(t)
	url := n.NATSURL()

	out := natsCLI(t, url, "req", "--raw", "orisun.api.append.default",
		`{"events":[{"type":"cli.test","data":{"n":1},"tags":["x"]},{"type":"cli.test.other","data":{"n":2}}]}`)
	var res api.AppendReply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil || res.First != 1 || res.Last != 2 {
		t.Fatalf("append reply %q: %v", out, err)
	}
	out = natsCLI(t, url, "req", "--raw", "orisun.api.read.default", `{"after":0,"limit":10}`)
	var rd api.ReadReply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rd); err != nil || len(rd.Events) != 2 || rd.Head != 2 {
		t.Fatalf("read reply %q: %v", out, err)
	}
	out = natsCLI(t, url, "req", "--raw", "orisun.api.latest.default", `{"query":{"items":[{"tags":["x"]}]}}`)
	var l api.LatestReply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &l); err != nil || l.Event == nil || l.Event.Position != 1 || l.Head != 2 {
		t.Fatalf("latest reply %q: %v", out, err)
	}
	// An error reply shows the micro error headers to a plain client.
	out = natsCLI(t, url, "req", "orisun.api.read.default", `{"after":0,"limit":20000}`)
	if !strings.Contains(out, "limit: 20000 is above the maximum 10000") {
		t.Fatalf("error reply %q", out)
	}

	out = natsCLI(t, url, "micro", "ls")
	if !strings.Contains(out, "orisun") || !strings.Contains(out, api.ServiceVersion) {
		t.Fatalf("nats micro ls: %s", out)
	}
	out = natsCLI(t, url, "micro", "info", "orisun", "--json")
	var wrapped struct {
		Info struct {
			Name      string `json:"name"`
			Endpoints []struct {
				Subject string `json:"subject"`
			} `json:"endpoints"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &wrapped); err != nil {
		t.Fatalf("nats micro info: %v\n%s", err, out)
	}
	info := wrapped.Info
	var subjects []string
	for _, e := range info.Endpoints {
		subjects = append(subjects, e.Subject)
	}
	want := "orisun.api.append.* orisun.api.read.* orisun.api.latest.* orisun.api.boundaries orisun.api.boundaries.create orisun.api.status"
	if info.Name != "orisun" || strings.Join(subjects, " ") != want {
		t.Fatalf("nats micro info: %s %v\n%s", info.Name, subjects, out)
	}

	// The stream, read by sequence: sequence s is position s (I2), with
	// the event as the body, in the shape the read API returns.
	for seq := uint64(1); seq <= 2; seq++ {
		var msg struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Hdrs    string `json:"hdrs"`
			Data    string `json:"data"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			bin := testutil.Build(t, natsCLIBinary)
			home := t.TempDir()
			cmd := exec.Command(bin, "--server", url, "stream", "get", "ORISUN_default", fmt.Sprint(seq), "--json")
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
			out, err := cmd.Output()
			if err == nil && json.Unmarshal(out, &msg) == nil && msg.Seq == seq {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nats stream get ORISUN_default %d: %v %s", seq, err, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		hdrs, _ := base64.StdEncoding.DecodeString(msg.Hdrs)
		data, _ := base64.StdEncoding.DecodeString(msg.Data)
		pos := regexp.MustCompile(`Orisun-Position: (\d+)`).FindSubmatch(hdrs)
		if pos == nil || string(pos[1]) != fmt.Sprint(seq) {
			t.Fatalf("sequence %d: headers %q", seq, hdrs)
		}
		var e event.Event
		if err := json.Unmarshal(data, &e); err != nil || e.Position != seq || e.ID != rd.Events[seq-1].ID {
			t.Fatalf("sequence %d: body %s (%v)", seq, data, err)
		}
		if wantSubj := "orisun.events.default." + e.Type; msg.Subject != wantSubj {
			t.Fatalf("sequence %d on %s, want %s", seq, msg.Subject, wantSubj)
		}
		// The stream body and the read API's event are the same JSON.
		want, _ := json.Marshal(rd.Events[seq-1])
		got, _ := json.Marshal(e)
		if string(want) != string(got) {
			t.Fatalf("stream body %s, read API event %s", got, want)
		}
	}
}
