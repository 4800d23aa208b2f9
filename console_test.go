package orisun_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/history"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestConsoleOverviewHTTP: a real node's listener serves the console's
// overview page and the data it polls (/status) with the figures of an
// append; the event pages follow the access rule of docs/console.md: open
// on a loopback listener before an embedded NATS without credentials, off
// (saying how to turn them on) once NATS has credentials, and behind the
// console's login once it is configured.
func TestConsoleOverviewHTTP(t *testing.T) {
	ctx := context.Background()
	n := setup(t, "", func(c *orisun.Config) { withHTTP(c); c.Boundaries = []string{"default", "orders"} })
	mustAppend(t, ctx, n, "orders", events(3, "order.placed", 32))
	waitSettled(t, n, 30*time.Second)

	code, body := httpGet(t, n, "/console/")
	if code != http.StatusOK || !strings.Contains(body, `<script src="console.js"`) {
		t.Fatalf("/console/: %d %s", code, body)
	}
	if code, body := httpGet(t, n, "/console/console.js"); code != http.StatusOK || !strings.Contains(body, `fetch("/status"`) {
		t.Fatalf("/console/console.js: %d %.200s", code, body)
	}
	st := httpStatus(t, n)
	if b := boundaryOf(t, st, "orders"); b.Head != 3 || b.Published != 3 || b.State != "leading" {
		t.Fatalf("orders in /status: %+v", b)
	}
	if code, body := httpGet(t, n, "/console/events"); code != http.StatusOK {
		t.Fatalf("event pages on loopback without NATS credentials: %d %s, want open", code, body)
	}

	guarded := setup(t, "", func(c *orisun.Config) { withHTTP(c); c.NATSUser, c.NATSPassword = "app", "app-pass" })
	for _, path := range []string{"/console/events", "/console/events/default?from=1", "/console/events/default/tail", "/console/login"} {
		code, body = httpGet(t, guarded, path)
		if code != http.StatusForbidden || !strings.Contains(body, "NATS credentials are configured") || !strings.Contains(body, "ORISUN_CONSOLE_USER") {
			t.Fatalf("%s with NATS credentials and no console login: %d %s", path, code, body)
		}
	}
	if code, body := httpGet(t, guarded, "/console/"); code != http.StatusOK {
		t.Fatalf("the overview needs no login: %d %s", code, body)
	}

	login := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.NATSUser, c.NATSPassword = "app", "app-pass"
		c.ConsoleUser, c.ConsolePassword = "ops", "ops-password"
	})
	for _, path := range []string{"/console/events", "/console/events/default?from=1", "/console/events/default/tail"} {
		for _, pw := range []string{"wrong-password", "app-pass", ""} {
			resp := getAs(t, login, path, "ops", pw)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s with password %q: %d, want 401", path, pw, resp.StatusCode)
			}
		}
	}
	resp := getAs(t, login, "/console/events/default?from=1", "ops", "ops-password")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the log with the right password: %d, want 200", resp.StatusCode)
	}
	// The page itself and its charts show what /status shows: no login.
	for _, path := range []string{"/console/boundary/default", "/console/history/default"} {
		if code, body := httpGet(t, login, path); code != http.StatusOK {
			t.Fatalf("%s needs no login: %d %s", path, code, body)
		}
	}
}

// getAs is a GET with basic auth (none when password is empty).
func getAs(t *testing.T, n *orisun.Node, path, user, password string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.HTTPAddr()+path, nil)
	if password != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestConsoleBoundaryHTTP: one boundary's data as the page reads it from
// a real node. The history moves with an append without any store read
// of its own (appended, then published, and a lag back to 0); the log
// gives pages of 50 from a position, filtered by type and by tag as the
// API's query, each event with id, position, epoch, time and tags; bad
// filters and positions are 400s naming the field; the live tail sends
// the events appended after it started, caught up then live, and its
// goroutines end when the client goes (the package's leak check).
func TestConsoleBoundaryHTTP(t *testing.T) {
	ctx := context.Background()
	n := setup(t, "", func(c *orisun.Config) { withHTTP(c); c.Boundaries = []string{"default"} })
	waitSampling(t, n, "default")
	in := events(120, "order.placed", 32)
	for i := range in {
		in[i].Tags = []string{fmt.Sprintf("order:%d", i%7)}
	}
	in[77].Type, in[77].Tags = "order.cancelled", []string{"order:77", "vip"}
	// Tags with a comma and with spaces at their ends are whole values of
	// the filter (tags=…&tags=…), found as they were appended.
	in[5].Tags = []string{"order:5", "name:Smith, John", " padded "}
	// Its data is shown as stored: digits beyond 2^53, 1.0, key order.
	in[5].Data = json.RawMessage(`{"b":1,"a":12345678901234567890,"x":1.0,"h":"<&>"}`)
	if _, err := n.Append(ctx, "default", in, nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)

	// History: within a few seconds the appended and published series
	// have counted the 120 events, and the lag is back to 0.
	var h history.Series
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the history's last answer: %s", last)
		}
	}()
	took := testutil.Eventually(t, "the history to count 120 appended and published events and a lag of 0", 10*time.Second, 100*time.Millisecond, func() bool {
		h = historyOf(t, n, "default")
		if len(h.LagEvents) == 0 {
			return false
		}
		lag := h.LagEvents[len(h.LagEvents)-1]
		last = fmt.Sprintf("appended %d, published %d, last lag %v", sum(h.Appended), sum(h.Published), lag)
		return sum(h.Appended) == 120 && sum(h.Published) == 120 && lag != nil && *lag == 0
	})
	t.Logf("the history counted the append within %s", took)
	if code, body := httpGet(t, n, fmt.Sprintf("/console/history/default?after=%d", h.End+60)); code != http.StatusOK || !strings.Contains(body, `"appended": null`) {
		t.Fatalf("history after the last second: %d %s", code, body)
	}
	for path, want := range map[string]string{
		"/console/history/nope":               "does not run on this node",
		"/console/history/default?after=x":    "after",
		"/console/events/default?from=0":      "from",
		"/console/events/default?before=x":    "before",
		"/console/events/default?tags=":       "", // no filter: fine
		"/console/events/default?types=a%20b": "type",
		"/console/events/nope":                "nope",
	} {
		code, body := httpGet(t, n, path)
		if want == "" {
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			continue
		}
		if code/100 != 4 || !strings.Contains(body, want) {
			t.Fatalf("%s: %d %s, want a 4xx naming %q", path, code, body, want)
		}
	}

	type page struct {
		Epoch  string         `json:"epoch"`
		Head   uint64         `json:"head"`
		Events []orisun.Event `json:"events"`
		More   bool           `json:"more"`
	}
	read := func(path string) page {
		t.Helper()
		code, body := httpGet(t, n, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var p page
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Newest first, the default: 120 down to 71, then 70 down to 21,
	// then 20 down to 1.
	p := read("/console/events/default")
	if len(p.Events) != 50 || p.Events[0].Position != 120 || p.Events[49].Position != 71 || !p.More || p.Head != 120 || p.Epoch == "" {
		t.Fatalf("newest page: %d events, %d–%d, more %v, head %d", len(p.Events), p.Events[0].Position, p.Events[len(p.Events)-1].Position, p.More, p.Head)
	}
	if p = read("/console/events/default?before=21"); len(p.Events) != 20 || p.Events[0].Position != 20 || p.Events[19].Position != 1 || p.More {
		t.Fatalf("below 21: %d events, more %v", len(p.Events), p.More)
	}
	if p = read("/console/events/default?before=80&tags=vip"); len(p.Events) != 1 || p.Events[0].Position != 78 {
		t.Fatalf("below 80 with tag vip: %+v", p.Events)
	}
	// From a position, lowest first.
	p = read("/console/events/default?from=1")
	if len(p.Events) != 50 || p.Events[0].Position != 1 || p.Events[49].Position != 50 || !p.More {
		t.Fatalf("from 1: %d events, %d–%d, more %v", len(p.Events), p.Events[0].Position, p.Events[len(p.Events)-1].Position, p.More)
	}
	if e := p.Events[3]; e.ID == "" || e.Epoch != p.Epoch || e.Time.IsZero() || len(e.Tags) != 1 || e.Tags[0] != "order:3" {
		t.Fatalf("event 4: %+v", e)
	}
	// The text the page shows is the node's, indented from the stored
	// bytes (the page does not parse and encode the data).
	_, body := httpGet(t, n, "/console/events/default?from=6")
	var shown struct {
		Events []struct {
			Position uint64 `json:"position"`
			JSON     string `json:"json"`
			DataJSON string `json:"data_json"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(body), &shown); err != nil || len(shown.Events) == 0 {
		t.Fatalf("from 6: %v %.300s", err, body)
	}
	wantData := "  \"data\": {\n    \"b\": 1,\n    \"a\": 12345678901234567890,\n    \"x\": 1.0,\n    \"h\": \"<&>\"\n  }\n"
	if e := shown.Events[0]; e.Position != 6 || !strings.Contains(e.JSON, wantData) || !strings.HasPrefix(e.JSON, "{\n  \"id\": ") ||
		e.DataJSON != `{"b":1,"a":12345678901234567890,"x":1.0,"h":"<&>"}` {
		t.Fatalf("event 6 as the page shows it:\n%s\ndata %s\nwant its data as stored:\n%s", e.JSON, e.DataJSON, wantData)
	}
	p = read("/console/events/default?from=101")
	if len(p.Events) != 20 || p.Events[0].Position != 101 || p.More {
		t.Fatalf("from 101: %d events, more %v", len(p.Events), p.More)
	}
	p = read("/console/events/default?tags=vip")
	if len(p.Events) != 1 || p.Events[0].Position != 78 || p.Events[0].Type != "order.cancelled" {
		t.Fatalf("tag vip: %+v", p.Events)
	}
	for _, q := range []string{"tags=name%3ASmith%2C%20John", "tags=%20padded%20", "tags=name%3ASmith%2C%20John&tags=%20padded%20&tags=order%3A5"} {
		if p = read("/console/events/default?" + q); len(p.Events) != 1 || p.Events[0].Position != 6 {
			t.Fatalf("%s: %d events, want position 6 alone", q, len(p.Events))
		}
	}
	for _, q := range []string{"tags=name%3ASmith", "tags=padded", "tags=%20padded%20&tags=vip"} {
		if p = read("/console/events/default?" + q); len(p.Events) != 0 {
			t.Fatalf("%s: %d events, want none (a tag is matched whole)", q, len(p.Events))
		}
	}
	p = read("/console/events/default?types=order.placed&tags=order:3")
	if len(p.Events) != 17 { // 120 events, i%7 == 3: 17 of them
		t.Fatalf("type order.placed and tag order:3: %d events", len(p.Events))
	}

	// The live tail: from now, an append after it started arrives, and
	// the filter holds.
	tctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(tctx, "GET", "http://"+n.HTTPAddr()+"/console/events/default/tail?tags=vip", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tail: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := sseLines(resp.Body)
	next := func(prefix string) string {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("tail ended waiting for %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q within 10 s", prefix)
			}
		}
	}
	if l := next("data:"); !strings.Contains(l, `"after":120`) {
		t.Fatalf("tail start: %s", l)
	}
	next("event: live")
	if _, err := n.Append(ctx, "default", []orisun.Input{
		{Type: "order.placed", Data: json.RawMessage(`{"n":1}`), Tags: []string{"order:1"}},
		{Type: "order.cancelled", Data: json.RawMessage(`{"n":2}`), Tags: []string{"vip"}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	next("event: event")
	if l := next("data:"); !strings.Contains(l, `"position":122`) || !strings.Contains(l, `"vip"`) {
		t.Fatalf("tail event: %s", l)
	}
	if b := boundaryOf(t, httpStatus(t, n), "default"); b.SubsLive != 1 {
		t.Fatalf("the tail is not a live subscription in the status: %d live", b.SubsLive)
	}
	cancel()
	resp.Body.Close()
	for range lines {
	}
	// The client gone, the node's subscription ends with it.
	testutil.Eventually(t, "the tail's subscription to end with its client", 5*time.Second, 20*time.Millisecond, func() bool {
		b := boundaryOf(t, httpStatus(t, n), "default")
		return b.SubsLive == 0 && b.SubsCatchingUp == 0
	})

	// A resumed tail names the epoch of its events: the boundary's goes
	// on; another (the boundary reset while the page was paused) ends the
	// tail, saying so, instead of following the new epoch's positions.
	for _, c := range []struct{ epoch, want string }{{p.Epoch, "event: live"}, {"e-before-a-reset", "epoch changed"}} {
		tctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(tctx, "GET", "http://"+n.HTTPAddr()+"/console/events/default/tail?after=121&epoch="+c.epoch, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		lines = sseLines(resp.Body)
		if c.want == "event: live" {
			next(c.want)
		} else if l := next("data:"); !strings.Contains(l, c.epoch) {
			t.Fatalf("resumed tail start: %s", l)
		} else if l := next("event: end"); l != "event: end" {
			t.Fatal(l)
		} else if l := next("data:"); !strings.Contains(l, c.want) {
			t.Fatalf("a tail resumed in another epoch: %s, want an end naming %q", l, c.want)
		}
		cancel()
		resp.Body.Close()
		for range lines {
		}
	}

	// The node stopping ends a tail in progress, saying so, and does not
	// wait on it.
	resp, err = http.Get("http://" + n.HTTPAddr() + "/console/events/default/tail")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines = sseLines(resp.Body)
	next("event: live")
	next("data:")
	start := time.Now()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the node stopped in %s with a tail open", time.Since(start))
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return // the stream ended
			}
			if strings.HasPrefix(l, "data:") {
				t.Logf("the tail said at the end: %s", l)
			}
		case <-deadline:
			t.Fatal("the tail's stream did not end within 5 s of the node's stop")
		}
	}
}

// sseLines sends the lines of a server-sent event stream as they come,
// and closes when it ends.
func sseLines(r io.Reader) chan string {
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// waitSampling waits for the node's first sample of the boundary with its
// head and its published position known: the charts count what happens
// from then on.
func waitSampling(t *testing.T, n *orisun.Node, boundary string) {
	t.Helper()
	testutil.Eventually(t, "a first sample of "+boundary+" with the head and the published position known", 10*time.Second,
		100*time.Millisecond, func() bool {
			h := historyOf(t, n, boundary)
			k := len(h.Published) - 1
			return k >= 0 && h.Published[k] != nil && h.Appended[k] != nil
		})
}

// historyOf reads a boundary's history from the node's listener.
func historyOf(t *testing.T, n *orisun.Node, boundary string) history.Series {
	t.Helper()
	code, body := httpGet(t, n, "/console/history/"+boundary)
	if code != http.StatusOK {
		t.Fatalf("history of %s: %d %s", boundary, code, body)
	}
	var h history.Series
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// sum adds the known values of a series.
func sum(xs []*uint32) (s uint32) {
	for _, x := range xs {
		if x != nil {
			s += *x
		}
	}
	return s
}
