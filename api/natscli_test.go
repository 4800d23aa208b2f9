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

// natsCLI runs the nats CLI against url (testutil.RunNATSCLI) and
// returns its standard output.
func natsCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, stderr, err := testutil.RunNATSCLI(t, url, args...)
	if err != nil {
		t.Fatalf("nats %s: %v\nstdout %s\nstderr %s", strings.Join(args, " "), err, out, stderr)
	}
	return out
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
		testutil.Until(t, fmt.Sprintf("nats stream get ORISUN_default %d", seq), 30*time.Second, 50*time.Millisecond, func() error {
			bin := testutil.Build(t, testutil.NATSCLI)
			home := t.TempDir()
			cmd := exec.Command(bin, "--server", url, "stream", "get", "ORISUN_default", fmt.Sprint(seq), "--json")
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
			out, err := cmd.Output()
			if err == nil && json.Unmarshal(out, &msg) == nil && msg.Seq == seq {
				return nil
			}
			return fmt.Errorf("%v %s", err, out)
		})
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

// TestNATSCLIWithoutCredentials_S13: against a node with the default
// configuration (no credentials), the nats CLI (v0.5.0) over TCP without
// credentials is the application principal (docs/design.md §12). It can
// discover and call the API, read the streams (info, get, view, a
// subscription through a JetStream consumer by stream or by subject) and
// create and read a consumer of its own. It cannot publish into the event
// subjects, answer the API, subscribe to the event subjects with a core
// subscription, or create, change, purge or delete a stream: each is a
// permissions violation that makes the command fail, and afterwards the
// stream is what it was (I2).
func TestNATSCLIWithoutCredentials_S13(t *testing.T) {
	t.Parallel()
	n, _ := setup(t)
	url := n.NATSURL()

	var ids []string
	for _, typ := range []string{"cli.first", "cli.second"} {
		out := natsCLI(t, url, "req", "--raw", "orisun.api.append.default", `{"events":[{"type":"`+typ+`","data":{}}]}`)
		if !strings.Contains(out, `"last":`) {
			t.Fatalf("append reply %q", out)
		}
	}
	var rd api.ReadReply
	if err := json.Unmarshal([]byte(natsCLI(t, url, "req", "--raw", "orisun.api.read.default", `{"after":0}`)), &rd); err != nil || len(rd.Events) != 2 {
		t.Fatalf("read: %v %+v", err, rd)
	}
	for _, e := range rd.Events {
		ids = append(ids, e.ID)
	}
	type streamInfo struct {
		Config struct {
			Subjects []string `json:"subjects"`
			MaxMsgs  int64    `json:"max_msgs"`
		} `json:"config"`
		State struct {
			Messages uint64 `json:"messages"`
			LastSeq  uint64 `json:"last_seq"`
		} `json:"state"`
	}
	info := func() streamInfo {
		t.Helper()
		var si streamInfo
		out := natsCLI(t, url, "stream", "info", "ORISUN_default", "--json")
		if err := json.Unmarshal([]byte(out), &si); err != nil {
			t.Fatalf("nats stream info: %v\n%s", err, out)
		}
		return si
	}
	testutil.Eventually(t, "both events in the stream", 30*time.Second, 50*time.Millisecond, func() bool { return info().State.LastSeq == 2 })
	hasBoth := func(what, out string) {
		t.Helper()
		for _, id := range ids {
			if !strings.Contains(out, id) {
				t.Fatalf("%s: event %s missing from\n%s", what, id, out)
			}
		}
	}

	// Allowed.
	if out := natsCLI(t, url, "micro", "ls"); !strings.Contains(out, "orisun") {
		t.Fatalf("nats micro ls: %s", out)
	}
	if out := natsCLI(t, url, "micro", "info", "orisun"); !strings.Contains(out, "orisun.api.append.*") {
		t.Fatalf("nats micro info orisun: %s", out)
	}
	if out := natsCLI(t, url, "stream", "get", "ORISUN_default", "2"); !strings.Contains(out, ids[1]) {
		t.Fatalf("nats stream get: %s", out)
	}
	hasBoth("nats sub --stream", natsCLI(t, url, "sub", "--stream", "ORISUN_default", "--all", "--count", "2"))
	hasBoth("nats sub --all by subject", natsCLI(t, url, "sub", "orisun.events.default.>", "--all", "--count", "2"))
	natsCLI(t, url, "consumer", "add", "ORISUN_default", "reader", "--pull", "--defaults")
	hasBoth("nats consumer next", natsCLI(t, url, "consumer", "next", "ORISUN_default", "reader", "--count", "2"))
	// nats stream view pages interactively and wants a terminal: script(1)
	// gives it one.
	if script, err := exec.LookPath("script"); err != nil {
		t.Logf("nats stream view not run: no script(1) to give it a terminal (%v)", err)
	} else {
		bin := testutil.Build(t, testutil.NATSCLI)
		home := t.TempDir()
		cmd := exec.Command(script, "-qec", bin+" --server "+url+" --timeout 3s stream view ORISUN_default", "/dev/null")
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nats stream view: %v\n%s", err, out)
		}
		hasBoth("nats stream view", string(out))
	}

	// Refused: each command fails with the server's permissions violation.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "orisun.events.default.cli.forged", `{"forged":true}`}, `Publish to "orisun.events.default.cli.forged"`},
		{[]string{"reply", "orisun.api.append.default", `{"epoch":"x","first":1,"last":1}`}, `Subscription to "orisun.api.append.default"`},
		{[]string{"sub", "orisun.events.default.>"}, `Subscription to "orisun.events.default.>"`},
		{[]string{"stream", "rm", "ORISUN_default", "-f"}, `Publish to "$JS.API.STREAM.DELETE.ORISUN_default"`},
		{[]string{"stream", "purge", "ORISUN_default", "-f"}, `Publish to "$JS.API.STREAM.PURGE.ORISUN_default"`},
		{[]string{"stream", "edit", "ORISUN_default", "--max-msgs", "10", "-f"}, `Publish to "$JS.API.STREAM.UPDATE.ORISUN_default"`},
		{[]string{"stream", "add", "SHADOW", "--subjects", "orisun.events.>", "--storage", "memory", "--defaults"}, `Publish to "$JS.API.STREAM.CREATE.SHADOW"`},
	} {
		out, stderr, err := testutil.RunNATSCLI(t, url, c.args...)
		if err == nil {
			t.Fatalf("nats %s succeeded:\n%s%s", strings.Join(c.args, " "), out, stderr)
		}
		if !strings.Contains(out+stderr, "Permissions Violation for "+c.want) {
			t.Fatalf("nats %s: %v, want a permissions violation for %s:\n%s%s", strings.Join(c.args, " "), err, c.want, out, stderr)
		}
	}
	si := info()
	if si.State.Messages != 2 || si.State.LastSeq != 2 || si.Config.MaxMsgs != -1 ||
		strings.Join(si.Config.Subjects, ",") != "orisun.events.default.>" {
		t.Fatalf("the stream changed: %+v", si)
	}
	if out := natsCLI(t, url, "stream", "get", "ORISUN_default", "1"); !strings.Contains(out, ids[0]) {
		t.Fatalf("nats stream get after the refusals: %s", out)
	}
}
