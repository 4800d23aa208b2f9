package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// maxPayload is small so that the too-large and page-truncation cases need
// little data.
const maxPayload = 8192

// setup starts a node on SQLite in a temporary directory with a random NATS
// port, and connects a plain NATS client to it over TCP.
func setup(t *testing.T) (*orisun.Node, *nats.Conn) {
	t.Helper()
	n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, NATSMaxPayload: maxPayload,
		PollInterval: 20 * time.Millisecond, Boundaries: []string{"default", "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	})
	nc := natstest.Connect(t, n.NATSURL(), nats.Name("api-test"))
	return n, nc
}

func request(t *testing.T, nc *nats.Conn, subject, body string) *nats.Msg {
	t.Helper()
	msg, err := nc.Request(subject, []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return msg
}

// ok sends a request that must succeed and decodes its reply into v.
func ok(t *testing.T, nc *nats.Conn, subject, body string, v any) {
	t.Helper()
	msg := request(t, nc, subject, body)
	if c := msg.Header.Get("Nats-Service-Error-Code"); c != "" {
		t.Fatalf("%s %s: error %s %s: %s", subject, body, c, msg.Header.Get("Nats-Service-Error"), msg.Data)
	}
	if err := json.Unmarshal(msg.Data, v); err != nil {
		t.Fatalf("%s: reply %s: %v", subject, msg.Data, err)
	}
}

func head(t *testing.T, n *orisun.Node, boundary string) uint64 {
	t.Helper()
	b, err := n.Boundary(context.Background(), boundary)
	if err != nil {
		t.Fatal(err)
	}
	return b.Head
}

// wantNothingWritten fails the test unless, after what (requests that
// were refused), the boundary default still has its one event and the
// boundaries are still setup's two: no event written, no boundary made.
func wantNothingWritten(t *testing.T, n *orisun.Node, nc *nats.Conn, what string) {
	t.Helper()
	if h := head(t, n, "default"); h != 1 {
		t.Fatalf("head %d after %s, want 1", h, what)
	}
	var bs api.BoundariesReply
	ok(t, nc, "orisun.api.boundaries", `{}`, &bs)
	if len(bs.Boundaries) != 2 {
		t.Fatalf("boundaries %+v after %s, want default and other only", bs.Boundaries, what)
	}
}

func TestAppendReadThroughAPI(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.default",
		`{"events":[{"type":"order.placed","data":{"order":1},"tags":["order:1"]},
		            {"id":"0190b0a0-0000-7000-8000-00000000000a","type":"order.paid","data":{"order":1},"metadata":{"by":"me"}}]}`, &res)
	if res.First != 1 || res.Last != 2 || res.Epoch == "" {
		t.Fatalf("append reply %+v", res)
	}
	// An idempotent retry by id returns the stored positions (docs/design.md §3).
	var again api.AppendReply
	ok(t, nc, "orisun.api.append.default",
		`{"events":[{"id":"0190b0a0-0000-7000-8000-00000000000a","type":"order.paid","data":{"order":1},"metadata":{"by":"me"}}]}`, &again)
	if again.First != 2 || again.Last != 2 || head(t, n, "default") != 2 {
		t.Fatalf("retry: %+v, head %d", again, head(t, n, "default"))
	}
	// A condition that holds: nothing of type order.shipped after 0.
	var cond api.AppendReply
	ok(t, nc, "orisun.api.append.default",
		`{"events":[{"type":"order.shipped","data":{"order":1}}],"condition":{"query":{"items":[{"types":["order.shipped"]}]},"after":0}}`, &cond)
	if cond.First != 3 {
		t.Fatalf("conditional append %+v", cond)
	}

	var rd api.ReadReply
	ok(t, nc, "orisun.api.read.default", `{"after":0,"limit":10}`, &rd)
	if rd.Epoch != res.Epoch || rd.Head != 3 || len(rd.Events) != 3 {
		t.Fatalf("read %+v", rd)
	}
	e := rd.Events[0]
	if e.Position != 1 || e.Type != "order.placed" || string(e.Data) != `{"order":1}` || e.Boundary != "default" ||
		e.Epoch != res.Epoch || len(e.Tags) != 1 || e.Time.IsZero() {
		t.Fatalf("event %+v", e)
	}
	if string(rd.Events[1].Metadata) != `{"by":"me"}` || rd.Events[1].ID != "0190b0a0-0000-7000-8000-00000000000a" {
		t.Fatalf("event %+v", rd.Events[1])
	}
	// The raw reply carries data and metadata as JSON values, not strings.
	raw := request(t, nc, "orisun.api.read.default", `{"after":1,"limit":1}`)
	if !strings.Contains(string(raw.Data), `"data":{"order":1},"metadata":{"by":"me"}`) {
		t.Fatalf("raw read reply %s", raw.Data)
	}
	// A query and the default limit.
	ok(t, nc, "orisun.api.read.default", `{"query":{"items":[{"tags":["order:1"]}]}}`, &rd)
	if len(rd.Events) != 1 || rd.Events[0].Position != 1 {
		t.Fatalf("query read %+v", rd)
	}
	// An empty body is {}: everything from the start.
	ok(t, nc, "orisun.api.read.default", ``, &rd)
	if len(rd.Events) != 3 {
		t.Fatalf("empty-body read %+v", rd)
	}
	// Reading at the head is an empty page, not an error.
	ok(t, nc, "orisun.api.read.default", `{"after":3}`, &rd)
	if len(rd.Events) != 0 || rd.Head != 3 || rd.Events == nil {
		t.Fatalf("read at head %+v", rd)
	}
}

// TestReadLatestThroughAPI: orisun.api.latest.<boundary> answers the last
// matching event and the head of one snapshot, null when none matches, and
// the decision appended under {query, after: head} conflicts once a
// matching event came in, with the position in the error body.
func TestReadLatestThroughAPI(t *testing.T) {
	t.Parallel()
	_, nc := setup(t)
	var l api.LatestReply
	// An empty boundary: no event, head 0.
	ok(t, nc, "orisun.api.latest.default", `{"query":{"items":[{"tags":["seat:1"]}]}}`, &l)
	if l.Event != nil || l.Head != 0 || l.Epoch == "" {
		t.Fatalf("latest of an empty boundary %+v", l)
	}
	raw := request(t, nc, "orisun.api.latest.default", `{}`)
	if !strings.Contains(string(raw.Data), `"event":null`) {
		t.Fatalf("raw latest reply %s: want \"event\":null", raw.Data)
	}
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.default", `{"events":[
		{"type":"seat.booked","data":{"seat":1},"tags":["seat:1"]},
		{"type":"seat.booked","data":{"seat":2},"tags":["seat:2"]},
		{"type":"seat.released","data":{"seat":1},"metadata":{"by":"me"},"tags":["seat:1"]},
		{"type":"seat.booked","data":{"seat":3},"tags":["seat:3"]}]}`, &res)
	ok(t, nc, "orisun.api.latest.default", `{"query":{"items":[{"tags":["seat:1"]}]}}`, &l)
	if l.Head != 4 || l.Epoch != res.Epoch || l.Event == nil || l.Event.Position != 3 || l.Event.Type != "seat.released" ||
		string(l.Event.Data) != `{"seat":1}` || string(l.Event.Metadata) != `{"by":"me"}` || l.Event.Boundary != "default" {
		t.Fatalf("latest of seat:1 %+v (event %+v)", l, l.Event)
	}
	// No query and an empty body: the last event of the boundary.
	for _, body := range []string{``, `{}`, `{"query":{"items":[]}}`} {
		ok(t, nc, "orisun.api.latest.default", body, &l)
		if l.Event == nil || l.Event.Position != 4 || l.Head != 4 {
			t.Fatalf("latest with %q: %+v", body, l)
		}
	}
	// Nothing matches: null and the head.
	ok(t, nc, "orisun.api.latest.default", `{"query":{"items":[{"types":["seat.booked"],"tags":["seat:2","seat:3"]}]}}`, &l)
	if l.Event != nil || l.Head != 4 {
		t.Fatalf("latest of nothing %+v", l)
	}
	// The decision: under {query, after: head} it succeeds once; a second
	// decision from the same read conflicts at the first's position.
	ok(t, nc, "orisun.api.latest.default", `{"query":{"items":[{"tags":["seat:1"]}]}}`, &l)
	decide := fmt.Sprintf(`{"events":[{"type":"seat.booked","data":{"seat":1},"tags":["seat:1"]}],
		"condition":{"query":{"items":[{"tags":["seat:1"]}]},"after":%d}}`, l.Head)
	ok(t, nc, "orisun.api.append.default", decide, &res)
	if res.First != 5 {
		t.Fatalf("decision %+v", res)
	}
	msg := request(t, nc, "orisun.api.append.default", decide)
	var eb api.ErrorBody
	if err := json.Unmarshal(msg.Data, &eb); err != nil {
		t.Fatal(err)
	}
	if eb.Error.Code != "conflict" || eb.Error.Position == nil || *eb.Error.Position != 5 ||
		msg.Header.Get("Nats-Service-Error-Code") != "409" {
		t.Fatalf("second decision: %s", msg.Data)
	}
}

func TestBoundariesAndStatusThroughAPI(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	var bs api.BoundariesReply
	ok(t, nc, "orisun.api.boundaries", `{}`, &bs)
	if len(bs.Boundaries) != 2 || bs.Boundaries[0].Name != "default" || bs.Boundaries[0].Epoch == "" {
		t.Fatalf("boundaries %+v", bs)
	}
	var b event.Boundary
	ok(t, nc, "orisun.api.boundaries.create", `{"name":"late"}`, &b)
	if b.Name != "late" || b.Epoch == "" || b.Head != 0 {
		t.Fatalf("created %+v", b)
	}
	// Creating it again returns the same boundary.
	var again event.Boundary
	ok(t, nc, "orisun.api.boundaries.create", `{"name":"late"}`, &again)
	if again.Epoch != b.Epoch {
		t.Fatalf("created again %+v, first %+v", again, b)
	}
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.late", `{"events":[{"type":"a","data":1}]}`, &res)
	ok(t, nc, "orisun.api.boundaries", ``, &bs)
	if len(bs.Boundaries) != 3 || bs.Boundaries[1].Name != "late" || bs.Boundaries[1].Head != 1 {
		t.Fatalf("boundaries %+v", bs)
	}
	// The status is the node's status document (docs/design.md §8); wait until
	// the new boundary's event is published.
	testutil.Until(t, "the new boundary's event to be published", 30*time.Second, 20*time.Millisecond, func() error {
		var st orisun.Status
		ok(t, nc, "orisun.api.status", `{}`, &st)
		if st.NodeID != n.Config().NodeID || len(st.Boundaries) != 3 {
			t.Fatalf("status %+v", st)
		}
		if st.Settled && st.Boundaries[1].Published == 1 && st.Boundaries[1].StreamLast == 1 {
			return nil
		}
		return fmt.Errorf("not settled: %+v", st)
	})
}

// TestBadRequests: every bad request gets its code in the header and the
// body, a message naming the field, nothing is written, and the server
// still answers afterwards.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.default", `{"events":[{"type":"seat.booked","data":{"seat":1},"tags":["seat:1"]}]}`, &res)
	big := strings.Repeat("x", maxPayload-300)
	cases := []struct {
		name, subject, body, code, message string
	}{
		{"malformed JSON append", "orisun.api.append.default", `{"events":[{"type":`, "invalid", "not valid JSON"},
		{"malformed JSON read", "orisun.api.read.default", `{after:1}`, "invalid", "not valid JSON"},
		{"two values", "orisun.api.read.default", `{} {}`, "invalid", "more than one JSON value"},
		{"unknown field", "orisun.api.append.default", `{"events":[{"type":"a","data":1}],"conditon":{"after":0}}`, "invalid", `unknown field "conditon"`},
		{"unknown event field", "orisun.api.append.default", `{"events":[{"type":"a","data":1,"tag":["x"]}]}`, "invalid", `unknown field "tag"`},
		{"wrong type", "orisun.api.read.default", `{"after":-1}`, "invalid", "after"},
		{"no events", "orisun.api.append.default", `{"events":[]}`, "invalid", "events"},
		{"no data", "orisun.api.append.default", `{"events":[{"type":"a"}]}`, "invalid", "data is missing"},
		{"invalid event type", "orisun.api.append.default", `{"events":[{"type":"a b","data":1}]}`, "invalid", "events[0]: type"},
		{"wildcard event type", "orisun.api.append.default", `{"events":[{"type":"a.>","data":1}]}`, "invalid", "events[0]: type"},
		{"bad id", "orisun.api.append.default", `{"events":[{"id":"nope","type":"a","data":1}]}`, "invalid", "id"},
		{"unknown boundary append", "orisun.api.append.nosuch", `{"events":[{"type":"a","data":1}]}`, "not_found", "nosuch"},
		{"unknown boundary read", "orisun.api.read.nosuch", `{"after":0,"limit":10}`, "not_found", "nosuch"},
		{"invalid boundary name", "orisun.api.read.Nope", `{}`, "invalid", "boundary name"},
		{"limit 0", "orisun.api.read.default", `{"after":0,"limit":0}`, "invalid", "limit: 0 is below the minimum 1"},
		{"limit 10001", "orisun.api.read.default", `{"after":0,"limit":10001}`, "invalid", "limit: 10001 is above the maximum 10000"},
		{"limit 20000", "orisun.api.read.default", `{"limit":20000}`, "invalid", "limit: 20000 is above the maximum 10000"},
		{"after past head", "orisun.api.read.default", `{"after":5,"limit":10}`, "invalid", "after: 5 is past the head 1"},
		{"bad query type", "orisun.api.read.default", `{"query":{"items":[{"types":["*"]}]}}`, "invalid", "query"},
		{"backwards with after", "orisun.api.read.default", `{"backwards":true,"after":1}`, "invalid", "after: 1 is for a forward read"},
		{"before without backwards", "orisun.api.read.default", `{"before":3}`, "invalid", `before: 3 is for a backward read; send "backwards": true`},
		{"backwards not a bool", "orisun.api.read.default", `{"backwards":"yes"}`, "invalid", "backwards: a JSON string cannot be a bool"},
		{"negative before", "orisun.api.read.default", `{"backwards":true,"before":-1}`, "invalid", "before"},
		{"backwards twice", "orisun.api.read.default", `{"backwards":true,"Backwards":false}`, "invalid", `duplicate key "Backwards"`},
		{"backward limit 0", "orisun.api.read.default", `{"backwards":true,"limit":0}`, "invalid", "limit: 0 is below the minimum 1"},
		{"backward limit 10001", "orisun.api.read.default", `{"backwards":true,"limit":10001}`, "invalid", "limit: 10001 is above the maximum 10000"},
		{"backward bad query", "orisun.api.read.default", `{"backwards":true,"query":{"items":[{"types":["*"]}]}}`, "invalid", "query"},
		{"backward unknown boundary", "orisun.api.read.nosuch", `{"backwards":true}`, "not_found", "nosuch"},
		{"latest bad query", "orisun.api.latest.default", `{"query":{"items":[{"tags":[""]}]}}`, "invalid", "query"},
		{"latest unknown field", "orisun.api.latest.default", `{"after":0}`, "invalid", `unknown field "after"`},
		{"latest malformed JSON", "orisun.api.latest.default", `{"query":`, "invalid", "not valid JSON"},
		{"latest unknown boundary", "orisun.api.latest.nosuch", `{}`, "not_found", "nosuch"},
		{"latest invalid boundary name", "orisun.api.latest.No", `{}`, "invalid", "boundary name"},
		{"oversized event", "orisun.api.append.default", `{"events":[{"type":"a","data":"` + big + `"}]}`, "too_large", "limit (NATS max payload)"},
		{"condition conflict", "orisun.api.append.default",
			`{"events":[{"type":"seat.booked","data":{"seat":1}}],"condition":{"query":{"items":[{"tags":["seat:1"]}]},"after":0}}`,
			"conflict", "at position 1"},
		{"id with other content", "orisun.api.append.default",
			`{"events":[{"id":"` + firstID(t, nc) + `","type":"seat.booked","data":{"seat":2}}]}`, "conflict", "with other content"},
		{"bad create", "orisun.api.boundaries.create", `{"name":"Bad.Name"}`, "invalid", "name"},
		{"empty create", "orisun.api.boundaries.create", `{}`, "invalid", "name"},
		{"body for boundaries", "orisun.api.boundaries", `{"x":1}`, "invalid", `unknown field "x"`},
		{"body for status", "orisun.api.status", `[]`, "invalid", "request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := request(t, nc, c.subject, c.body)
			wantNum := strconv.Itoa(api.NumericCode(c.code))
			if got := msg.Header.Get("Nats-Service-Error-Code"); got != wantNum {
				t.Fatalf("header code %q, want %s; body %s", got, wantNum, msg.Data)
			}
			hmsg := msg.Header.Get("Nats-Service-Error")
			var eb api.ErrorBody
			if err := json.Unmarshal(msg.Data, &eb); err != nil {
				t.Fatalf("body %s: %v", msg.Data, err)
			}
			if eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.message) || hmsg != eb.Error.Message {
				t.Fatalf("got %+v (header %q), want code %s and a message with %q", eb.Error, hmsg, c.code, c.message)
			}
			// The error is a Go error that matches the sentinel.
			apiErr, isErr := api.DecodeError(msg.Header.Get("Nats-Service-Error-Code"), hmsg, msg.Data)
			if !isErr || api.CodeOf(apiErr) != c.code {
				t.Fatalf("decoded %v", apiErr)
			}
			// The conflict of a failed condition carries its position, in
			// the body and as an *event.ConflictError; the conflict of an
			// id stored with other content has none.
			var ce *event.ConflictError
			switch c.name {
			case "condition conflict":
				if eb.Error.Position == nil || *eb.Error.Position != 1 {
					t.Fatalf("condition conflict body %s: want position 1", msg.Data)
				}
				if !errors.As(apiErr, &ce) || ce.Position != 1 || !errors.Is(apiErr, event.ErrConflict) {
					t.Fatalf("decoded conflict %#v: want an *event.ConflictError at position 1", apiErr)
				}
			default:
				if eb.Error.Position != nil || errors.As(apiErr, &ce) {
					t.Fatalf("%s: body %s carries a position", c.name, msg.Data)
				}
			}
		})
	}
	// Nothing was written by any of them, and the server still answers.
	wantNothingWritten(t, n, nc, "the bad requests")
	ok(t, nc, "orisun.api.append.default", `{"events":[{"type":"a","data":1}]}`, &res)
	if res.First != 2 {
		t.Fatalf("append after bad requests: %+v", res)
	}
}

func firstID(t *testing.T, nc *nats.Conn) string {
	var rd api.ReadReply
	ok(t, nc, "orisun.api.read.default", `{"limit":1}`, &rd)
	return rd.Events[0].ID
}

// TestReadPageFitsMaxPayload: a page that would not fit one NATS message is
// cut short; head tells the reader to go on, and reading on yields every
// position once (I1).
func TestReadPageFitsMaxPayload(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	appendBig(t, n)
	var after uint64
	pages := 0
	for {
		rd := readPage(t, nc, fmt.Sprintf(`{"after":%d,"limit":10000}`, after))
		if len(rd.Events) == 0 {
			break
		}
		for _, e := range rd.Events {
			if e.Position != after+1 {
				t.Fatalf("position %d after %d", e.Position, after)
			}
			after = e.Position
		}
		pages++
		if after == rd.Head {
			break
		}
	}
	if after != 20 || pages < 3 {
		t.Fatalf("read up to %d in %d pages", after, pages)
	}
}

// appendBig appends 20 events of 1,500 bytes to default: more than one
// page of maxPayload holds.
func appendBig(t *testing.T, n *orisun.Node) {
	t.Helper()
	var evs []orisun.Input
	for range 20 {
		evs = append(evs, orisun.Input{Type: "big", Data: json.RawMessage(fmt.Sprintf(`"%s"`, strings.Repeat("y", 1500)))})
	}
	if _, err := n.Append(context.Background(), "default", evs, nil); err != nil {
		t.Fatal(err)
	}
}

// readPage reads a page of default with the request body, and fails the
// test unless the reply fits maxPayload.
func readPage(t *testing.T, nc *nats.Conn, body string) api.ReadReply {
	t.Helper()
	msg := request(t, nc, "orisun.api.read.default", body)
	if len(msg.Data) > maxPayload {
		t.Fatalf("reply of %d bytes exceeds the max payload", len(msg.Data))
	}
	var rd api.ReadReply
	if err := json.Unmarshal(msg.Data, &rd); err != nil {
		t.Fatal(err)
	}
	return rd
}

// TestStopAnswersUnavailable: after Stop no request hangs on a half-stopped
// node: the service is gone (no responders).
func TestStopEndsService(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := nc.Request("orisun.api.status", nil, 5*time.Second)
	if err == nil {
		t.Fatal("the API answered after Stop")
	}
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrTimeout) {
		t.Logf("after stop: %v", err)
	}
}

// TestUnsafeReplySubjectRefused_I2: a request whose reply subject lies in
// the event subjects is not served, so the service never publishes into a
// stream on a caller's behalf (the check that matters on an external NATS,
// where the API's connection has orisun's own permissions).
func TestUnsafeReplySubjectRefused_I2(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	if err := nc.PublishRequest("orisun.api.append.default", "orisun.events.default.forged",
		[]byte(`{"events":[{"type":"forged.reply","data":{}}]}`)); err != nil {
		t.Fatal(err)
	}
	// Requests on one endpoint are taken in order: once this one is
	// answered, the forged one was handled (refused) before it.
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.default", `{"events":[{"type":"real.request","data":{}}]}`, &res)
	if res.First != 1 || res.Last != 1 || head(t, n, "default") != 1 {
		t.Fatalf("the request with a reply into the event subjects was served: reply %+v, head %d", res, head(t, n, "default"))
	}
}
