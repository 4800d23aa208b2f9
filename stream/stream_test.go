package stream_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/stream"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	if got := stream.Name("orders"); got != "ORISUN_orders" {
		t.Fatal(got)
	}
	if got := stream.Subjects("orders"); got != "orisun.events.orders.>" {
		t.Fatal(got)
	}
	if got := stream.Subject("orders", "order.placed"); got != "orisun.events.orders.order.placed" {
		t.Fatal(got)
	}
	cfg := stream.Config("orders", "e1", stream.Limits{MaxMsgs: 10, MaxAge: time.Minute}, 7)
	if cfg.FirstSeq != 7 || cfg.MaxMsgs != 10 || cfg.MaxBytes != -1 || stream.Epoch(&cfg) != "e1" || cfg.Replicas != 1 ||
		cfg.ConsumerLimits.InactiveThreshold != stream.ConsumerInactiveMax {
		t.Fatalf("%+v", cfg)
	}
}

// TestMessageRoundTrip: the headers and body of docs/design.md §6, and Decode reads
// back what Message wrote.
func TestMessageRoundTrip(t *testing.T) {
	t.Parallel()
	e := event.Event{ID: event.NewID(), Boundary: "b", Epoch: "ep", Position: 42, Type: "a.b",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Tags: []string{"x"}, Data: json.RawMessage(`{"k":1}`)}
	m, err := stream.Message(&e, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		stream.HeaderEventID: e.ID, stream.HeaderPosition: "42", stream.HeaderEpoch: "ep", stream.HeaderType: "a.b",
		stream.HeaderTime: "2026-01-02T03:04:05.000000006Z", nats.MsgIdHdr: e.ID,
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(m.Data, &body); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "boundary", "epoch", "position", "type", "time", "tags", "data", "metadata"} {
		if _, ok := body[k]; !ok {
			t.Errorf("body has no %q: %s", k, m.Data)
		}
	}
	back, err := stream.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != e.ID || back.Position != 42 || !back.Time.Equal(e.Time) || string(back.Data) != `{"k":1}` {
		t.Fatalf("round trip: %+v", back)
	}
	m.Header.Set(stream.HeaderPosition, "41")
	if _, err := stream.Decode(m.Subject, m.Header, m.Data); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("headers disagreeing with the body: %v", err)
	}
}

// TestEncodedSizeIsAnUpperBound: the size appends check is never below the
// size of the message actually published.
func TestEncodedSizeIsAnUpperBound(t *testing.T) {
	t.Parallel()
	in := event.Input{ID: event.NewID(), Type: "some.type", Data: json.RawMessage(`{"a":"` + strings.Repeat("x", 5000) + `"}`),
		Metadata: json.RawMessage(`{"m":true}`), Tags: []string{"t1", "t2"}}
	est := stream.EncodedSize("boundary", &in)
	e := event.Event{ID: in.ID, Boundary: "boundary", Epoch: event.NewID(), Position: 123456789, Type: in.Type,
		Time: time.Now().UTC(), Tags: in.Tags, Data: in.Data, Metadata: in.Metadata}
	m, _ := stream.Message(&e, true)
	m.Header.Set("Nats-Expected-Last-Sequence", "123456788")
	actual := len(m.Data) + len(m.Subject)
	for k, vs := range m.Header {
		for _, v := range vs {
			actual += len(k) + len(v) + 4
		}
	}
	if est < actual {
		t.Fatalf("estimate %d below the actual size %d", est, actual)
	}
	if est > actual+200 {
		t.Fatalf("estimate %d far above the actual size %d", est, actual)
	}
}

// TestBodyMatchesEncodingJSON: the hand-written body encoder produces the
// same JSON value as encoding/json for the event, whatever its strings hold.
func TestBodyMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []event.Event{
		{ID: event.NewID(), Boundary: "b", Epoch: "e", Position: 1, Type: "t", Time: time.Now().UTC(), Tags: []string{},
			Data: json.RawMessage(`{"a":[1,2,{"b":null}]}`)},
		{ID: event.NewID(), Boundary: "b", Epoch: "e", Position: 18446744073709551615, Type: "a.b-c:d", Time: time.Unix(0, 1).UTC(),
			Tags: []string{`quote"`, `back\slash`, "<html>&", "ünïcødé", "tab\there", "nl\n", "\u2028"},
			Data: json.RawMessage(`"just a string"`), Metadata: json.RawMessage(`{"m":"\u00e9"}`)},
		{ID: event.NewID(), Boundary: "b", Epoch: "e", Position: 7, Type: "t", Time: time.Now().UTC(), Tags: nil,
			Data: json.RawMessage(`12.5e3`)},
	}
	for i, e := range cases {
		got, err := stream.Body(&e)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("case %d: body is not JSON: %v\n%s", i, err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalizeTags(g), normalizeTags(w)) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// normalizeTags treats a null tag list as empty (the body always writes []).
func normalizeTags(v any) any {
	m := v.(map[string]any)
	if m["tags"] == nil {
		m["tags"] = []any{}
	}
	return m
}

// TestDecodeNullMetadata: an event without metadata decodes with nil
// metadata, as the store returns it, so both paths deliver the same event.
func TestDecodeNullMetadata(t *testing.T) {
	e := event.Event{ID: event.NewID(), Boundary: "b", Epoch: "ep", Position: 1, Type: "t", Time: time.Now().UTC(),
		Tags: []string{}, Data: json.RawMessage(`{}`)}
	m, _ := stream.Message(&e, false)
	back, err := stream.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Metadata != nil {
		t.Fatalf("metadata %q, want nil", back.Metadata)
	}
}

// BenchmarkMessage: building one event's message (headers and body) is on
// the publisher's path once per event (docs/performance.md).
func BenchmarkMessage(b *testing.B) {
	data := make([]byte, 0, 1024)
	data = append(data, `{"note":"`...)
	for len(data) < 1022 {
		data = append(data, 'x')
	}
	data = append(data, `"}`...)
	e := event.Event{ID: "0190b0a0-0000-7000-8000-000000000001", Boundary: "default", Epoch: "0190b0a0-0000-7000-8000-0000000000ee",
		Position: 123456, Type: "order.placed", Time: time.Now(), Tags: []string{"customer:42"}, Data: data}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stream.Message(&e, true); err != nil {
			b.Fatal(err)
		}
	}
}
