package api_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// TestDuplicateKeysRefused: a request with a key given twice anywhere in
// its envelope (the top level, an event, the condition, a query and its
// items, the read request, the create request) is invalid, the message
// names the key and where it is, and nothing is written: encoding/json
// would let the last key win, and {"condition":{…},"condition":null} would
// append unconditionally. Keys are the same when the decoder takes them for
// the same field: escaped ("\u0063ondition") or in another case. The data
// and metadata of an event are the application's JSON and are stored as
// given, duplicate keys inside them included.
func TestDuplicateKeysRefused(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	var res api.AppendReply
	ok(t, nc, "orisun.api.append.default", `{"events":[{"type":"seat.booked","data":{"seat":1},"tags":["seat:1"]}]}`, &res)
	// Each of these conditions fails at position 1: a request whose
	// condition the decoder lost would append.
	const failing = `{"query":{"items":[{"tags":["seat:1"]}]},"after":0}`
	ev := `{"type":"seat.booked","data":{"seat":1}}`
	cases := []struct {
		name, subject, body, message string
	}{
		{"condition then null", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":` + failing + `,"condition":null}`,
			`duplicate key "condition" in the append request`},
		{"condition escaped", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":` + failing + `,"\u0063ondition":null}`,
			`duplicate key "condition" in the append request`},
		{"condition in upper case", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":` + failing + `,"CONDITION":null}`,
			`duplicate key "CONDITION" in the append request (the same field as "condition"`},
		{"events twice", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":` + failing + `,"events":[` + ev + `]}`,
			`duplicate key "events" in the append request`},
		{"event type", "orisun.api.append.default",
			`{"events":[` + ev + `,` + ev + `,` + ev + `,{"type":"seat.booked","data":{"seat":1},"type":"seat.freed"}]}`,
			`events[3]: duplicate key "type" in the append request`},
		{"event id", "orisun.api.append.default",
			`{"events":[{"id":"0190b0a0-0000-7000-8000-00000000000a","type":"a","data":1,"id":"0190b0a0-0000-7000-8000-00000000000b"}]}`,
			`events[0]: duplicate key "id"`},
		{"event data", "orisun.api.append.default", `{"events":[{"type":"a","data":1,"data":2}]}`, `events[0]: duplicate key "data"`},
		{"event metadata", "orisun.api.append.default", `{"events":[{"type":"a","data":1,"metadata":{},"metadata":null}]}`, `events[0]: duplicate key "metadata"`},
		{"event tags", "orisun.api.append.default", `{"events":[{"type":"a","data":1,"tags":["x"],"tags":["y"]}]}`, `events[0]: duplicate key "tags"`},
		{"condition query", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":{"query":{"items":[{"tags":["seat:1"]}]},"after":0,"query":{"items":[{"tags":["seat:2"]}]}}}`,
			`condition: duplicate key "query"`},
		{"condition after", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":{"query":{"items":[{"tags":["seat:1"]}]},"after":0,"after":1}}`,
			`condition: duplicate key "after"`},
		{"query items", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":{"query":{"items":[{"tags":["seat:1"]}],"items":[]},"after":0}}`,
			`condition.query: duplicate key "items"`},
		{"query item tags", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":{"query":{"items":[{"tags":["seat:1"],"tags":["seat:2"]}]},"after":0}}`,
			`condition.query.items[0]: duplicate key "tags"`},
		{"query item types", "orisun.api.append.default",
			`{"events":[` + ev + `],"condition":{"query":{"items":[{"types":["seat.booked"],"types":["x"]}]},"after":0}}`,
			`condition.query.items[0]: duplicate key "types"`},
		{"read after", "orisun.api.read.default", `{"after":1,"after":0}`, `duplicate key "after" in the read request`},
		{"read limit", "orisun.api.read.default", `{"limit":1,"limit":5}`, `duplicate key "limit" in the read request`},
		{"read backwards", "orisun.api.read.default", `{"backwards":true,"backwards":false}`, `duplicate key "backwards" in the read request`},
		{"read before", "orisun.api.read.default", `{"backwards":true,"before":9,"Before":0}`, `duplicate key "Before" in the read request`},
		{"read query", "orisun.api.read.default", `{"query":{"items":[{"tags":["x"]}]},"query":null}`, `duplicate key "query" in the read request`},
		{"read query item", "orisun.api.read.default", `{"query":{"items":[{"types":["a"]},{"tags":["x"],"Tags":[]}]}}`,
			`query.items[1]: duplicate key "Tags" in the read request`},
		{"latest query", "orisun.api.latest.default", `{"query":null,"query":{"items":[]}}`, `duplicate key "query" in the read-latest request`},
		{"create name", "orisun.api.boundaries.create", `{"name":"dupa","name":"dupb"}`, `duplicate key "name" in the create-boundary request`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := request(t, nc, c.subject, c.body)
			if got := msg.Header.Get(api.ErrorCodeHeader); got != strconv.Itoa(api.NumericCode(api.CodeInvalid)) {
				t.Fatalf("header code %q, want 400; body %s", got, msg.Data)
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(msg.Data, &eb); err != nil {
				t.Fatalf("body %s: %v", msg.Data, err)
			}
			if eb.Error.Code != api.CodeInvalid || !strings.Contains(eb.Error.Message, c.message) {
				t.Fatalf("got %+v, want invalid with %q", eb.Error, c.message)
			}
		})
	}
	wantNothingWritten(t, n, nc, "the refused requests")

	// Duplicate keys inside data and metadata are the application's:
	// stored as given (compacted), read back and streamed as given.
	ok(t, nc, "orisun.api.append.default",
		`{"events":[{"type":"doc.saved","data":{"x":1, "x":2,"y":{"z":[{"q":1,"q":2}]}},"metadata":{"by":"a","by":"b"}}]}`, &res)
	if res.First != 2 {
		t.Fatalf("append with duplicate keys in data: %+v", res)
	}
	const stored = `"data":{"x":1,"x":2,"y":{"z":[{"q":1,"q":2}]}},"metadata":{"by":"a","by":"b"}`
	raw := request(t, nc, "orisun.api.read.default", `{"after":1}`)
	if !strings.Contains(string(raw.Data), stored) {
		t.Fatalf("read reply %s does not hold %s", raw.Data, stored)
	}
	js := natstest.JetStream(t, nc)
	var body []byte
	testutil.Eventually(t, "position 2 in the stream", 10*time.Second, 20*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "ORISUN_default")
		if err != nil {
			return false
		}
		m, err := s.GetMsg(ctx, 2)
		if err != nil {
			return false
		}
		body = m.Data
		return true
	})
	if !strings.Contains(string(body), stored) {
		t.Fatalf("stream message %s does not hold %s", body, stored)
	}
}
