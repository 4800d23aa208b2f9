package stream

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// decodeBodies are bodies as appendBody writes them (which fastBody must
// take) and bodies in other forms or wrong (which it may refuse).
func decodeBodies(tb testing.TB) (written, other []string) {
	tb.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	events := []event.Event{
		{ID: "0192f0c0-0000-7000-8000-000000000001", Boundary: "b", Epoch: "ep", Position: 42, Type: "a.b", Time: at,
			Tags: []string{"x", "y:1"}, Data: json.RawMessage(`{"k":1}`)},
		{ID: "i", Boundary: "orders", Epoch: "e", Position: 1, Type: "t", Time: at.Truncate(time.Second),
			Data: json.RawMessage(`[1, {"a" : "é\u00e9"}]`), Metadata: json.RawMessage(`{"m":null}`)},
		{ID: "i", Boundary: "b", Epoch: "e", Position: 18446744073709551615, Type: "ünï", Time: at,
			Tags: []string{}, Data: json.RawMessage(`"s"`), Metadata: json.RawMessage(`null`)},
		{ID: "i", Boundary: "b", Epoch: "e", Position: 0, Type: "t", Time: at, Data: json.RawMessage(`null`)},
	}
	for i := range events {
		written = append(written, string(appendBody(nil, &events[i], events[i].Time.UTC().Format(time.RFC3339Nano))))
	}
	// Strings that appendBody escapes: encoding/json's path.
	esc := events[0]
	esc.Type, esc.Tags = `a<b>&"c\`, []string{"tab\there"}
	other = append(other, string(appendBody(nil, &esc, esc.Time.Format(time.RFC3339Nano))))
	w := written[0]
	other = append(other,
		strings.Replace(w, `{"id":`, `{ "id":`, 1),                                                     // whitespace
		strings.Replace(w, `"id":`, `"ID":`, 1),                                                        // a key encoding/json matches without case
		strings.Replace(w, `"position":42`, `"position":042`, 1),                                       // leading zero
		strings.Replace(w, `"position":42`, `"position":4.2e1`, 1),                                     // not an integer
		strings.Replace(w, `"position":42`, `"position":18446744073709551616`, 1),                      // beyond uint64
		strings.Replace(w, `"position":42`, `"position":-42`, 1),                                       // negative
		strings.Replace(w, `"type":"a.b"`, `"type":"a\u002eb"`, 1),                                     // an escape
		strings.Replace(w, `"type":"a.b"`, "\"type\":\"a\xffb\"", 1),                                   // invalid UTF-8
		strings.Replace(w, `"type":"a.b"`, "\"type\":\"a\tb\"", 1),                                     // a control character
		strings.Replace(w, `"type":"a.b"`, `"type":null`, 1),                                           // null for a string
		strings.Replace(w, `"tags":["x","y:1"]`, `"tags":null`, 1),                                     // null tags
		strings.Replace(w, `"tags":["x","y:1"]`, `"tags":["x",]`, 1),                                   // a trailing comma
		strings.Replace(w, `"tags":["x","y:1"]`, `"tags":[,"x"]`, 1),                                   // a leading comma
		strings.Replace(w, `2026-01-02T03:04:05.000000006Z`, `2026-01-02T03:04:05.000000006+01:00`, 1), // another zone
		strings.Replace(w, `2026-01-02T03:04:05.000000006Z`, `2026-01-02T24:04:05Z`, 1),                // hour 24
		strings.Replace(w, `2026-01-02T03:04:05.000000006Z`, `2026-01-02 03:04:05Z`, 1),                // not RFC 3339
		strings.Replace(w, `"data":{"k":1}`, `"data":{"k":1,}`, 1),                                     // invalid data
		strings.Replace(w, `"data":{"k":1}`, "\"data\":{\"k\":\"\xff\"}", 1),                           // data not UTF-8
		strings.Replace(w, `,"metadata":null}`, `,"metadata":null,"extra":1}`, 1),                      // a field more
		strings.Replace(w, `,"metadata":null}`, `}`, 1),                                                // a field less
		strings.Replace(w, `"id":`, `"epoch":"x","id":`, 1),                                            // a field twice
		w+" ", w+"x", w+"{}", w[:len(w)-1], "", "{}", "null", `{"id":"i"}`,
	)
	return written, other
}

// TestDecodersAgree: fastBody takes every body appendBody writes with plain
// strings (or the fast path is dead), and whenever it takes a body its
// event is the one encoding/json decodes from it.
func TestDecodersAgree(t *testing.T) {
	t.Parallel()
	written, other := decodeBodies(t)
	testutil.DecodersAgree(t, fastBody, written, other, tagsAsDecoded)
}

func FuzzDecodersAgree(f *testing.F) {
	written, other := decodeBodies(f)
	testutil.FuzzDecoders(f, fastBody, written, other, tagsAsDecoded)
}

// tagsAsDecoded makes no tags an empty list, as Decode makes them on
// either path.
func tagsAsDecoded(e *event.Event) {
	if e.Tags == nil {
		e.Tags = []string{}
	}
}

// BenchmarkDecode: one 1 KB event's message, as a live subscription
// decodes it.
func BenchmarkDecode(b *testing.B) {
	data := json.RawMessage(`{"v":"` + strings.Repeat("x", 1016) + `"}`)
	e := event.Event{ID: event.NewID(), Boundary: "bench", Epoch: "0192f0c0-0000-7000-8000-000000000001", Position: 123456,
		Type: "bench.event", Time: time.Now(), Tags: []string{"bench"}, Data: data}
	m, err := Message(&e, false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(m.Subject, m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
}
