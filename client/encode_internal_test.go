package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// marshalNoHTML is json.Marshal without HTML escaping: what encodeAppend
// must write, byte for byte.
func marshalNoHTML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// TestEncodeAppend: for events of every kind (data and metadata compact or
// not, nil or empty, with `<>&`, escapes, invalid UTF-8; ids, types and
// tags with quotes, control bytes, non-ASCII, invalid UTF-8), encodeAppend
// writes what encoding/json writes without HTML escaping, and refuses what
// encoding/json cannot encode, naming the event and the field.
func TestEncodeAppend(t *testing.T) {
	t.Parallel()
	g := testutil.NewJSONGen(5)
	strs := []string{"", "a", "order.placed", "<b>&", `q"uote`, `back\slash`, "tab\there", "nul\x00", "é", "\xff", "\u2028", "日本"}
	raw := func() json.RawMessage {
		switch g.R.IntN(8) {
		case 0:
			return nil
		case 1:
			return json.RawMessage{}
		case 2:
			return json.RawMessage(g.Mutate(g.Value(2)))
		case 3:
			return json.RawMessage(" " + g.Value(2) + "\n")
		default:
			return json.RawMessage(g.Value(3))
		}
	}
	for i := range 20000 {
		var events []event.Input
		for range g.R.IntN(4) {
			e := event.Input{ID: strs[g.R.IntN(len(strs))], Type: strs[g.R.IntN(len(strs))], Data: raw(), Metadata: raw()}
			for range g.R.IntN(3) {
				e.Tags = append(e.Tags, strs[g.R.IntN(len(strs))])
			}
			if g.R.IntN(5) == 0 {
				e.Tags = []string{}
			}
			events = append(events, e)
		}
		if i%7 == 0 {
			events = []event.Input{}
		}
		var cond *event.Condition
		if g.R.IntN(3) == 0 {
			cond = &event.Condition{After: uint64(g.R.IntN(1000)), Query: event.Query{Items: []event.QueryItem{{Types: []string{strs[g.R.IntN(len(strs))]}, Tags: []string{"<&>"}}}}}
		}
		want, wantErr := marshalNoHTML(api.AppendRequest{Events: events, Condition: cond})
		got, err := encodeAppend(events, cond)
		if wantErr != nil {
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "events[") || !strings.Contains(err.Error(), "not valid JSON") {
				t.Fatalf("events %s: encoding/json says %v, encodeAppend %v", show(events), wantErr, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("events %s:\n got  %s (%v)\n want %s", show(events), got, err, want)
		}
	}
}

// TestEncodeAppendKeepsTheBytes: compact data goes as the application gave
// it, `<>&` included: what another NATS client sends for the same event.
func TestEncodeAppendKeepsTheBytes(t *testing.T) {
	t.Parallel()
	data := `{"html":"<b>Tom & Jerry</b>","sep":"` + "\u2028" + `","esc":"\u003c"}`
	got, err := encodeAppend([]event.Input{{Type: "a", Data: json.RawMessage(data), Metadata: json.RawMessage(`{ "by": "<x>" }`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"events":[{"type":"a","data":` + data + `,"metadata":{"by":"<x>"}}]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func show(events []event.Input) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "{%q %q %q %q %q} ", e.ID, e.Type, e.Data, e.Metadata, e.Tags)
	}
	return b.String()
}

// BenchmarkEncodeAppend: a 100-event append of 1 KB events, as the client
// encodes it, against json.Marshal (what it did before).
func BenchmarkEncodeAppend(b *testing.B) {
	events := benchEvents()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeAppend(events, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAppendMarshal(b *testing.B) {
	events := benchEvents()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(api.AppendRequest{Events: events}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchEvents() []event.Input {
	data := testutil.OrderData(1000)
	events := make([]event.Input, 100)
	for i := range events {
		events[i] = event.Input{ID: fmt.Sprintf("0190b0a0-0000-7000-8000-%012d", i), Type: "order.placed",
			Data: json.RawMessage(data), Metadata: json.RawMessage(`{"by":"web"}`), Tags: []string{"order:17", "customer:3"}}
	}
	return events
}
