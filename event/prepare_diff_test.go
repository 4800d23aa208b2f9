package event_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// oldCompactJSON is how Prepare checked and normalised data and metadata
// before it kept compact bytes as they are (issue 22): json.Compact
// always.
func oldCompactJSON(field string, raw json.RawMessage, required bool) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		if required {
			return nil, fmt.Errorf("%w: %s is missing; it must be a JSON value", event.ErrInvalid, field)
		}
		return nil, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(trimmed))
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, fmt.Errorf("%w: %s is not valid JSON: %v", event.ErrInvalid, field, err)
	}
	if !utf8.Valid(trimmed) {
		return nil, fmt.Errorf("%w: %s is not valid UTF-8", event.ErrInvalid, field)
	}
	return buf.Bytes(), nil
}

// TestPrepareStoresWhatItStoredBefore: for data and metadata of every kind
// (compact or not, whitespace around them, escapes, `<>&`, invalid
// UTF-8, deep nesting, broken JSON), Prepare returns the bytes, or the
// error, that it returned when it ran json.Compact on everything.
func TestPrepareStoresWhatItStoredBefore(t *testing.T) {
	t.Parallel()
	g := testutil.NewJSONGen(9)
	around := []string{"", "", "", " ", "\n", "\u00a0", "\t \r\n"}
	value := func(i int) string {
		var v string
		switch i % 10 {
		case 0:
			v = g.Deep(1 + g.R.IntN(1100))
		case 1:
			v = g.Mutate(g.Value(3))
		case 2:
			v = []string{"", "null", " null ", "nul", `"<>&"`, `{"a":"\u003c"}`, "\"\xff\"", `{"a" : 1}`}[g.R.IntN(8)]
		default:
			v = g.Value(4)
		}
		return around[g.R.IntN(len(around))] + v + around[g.R.IntN(len(around))]
	}
	for i := range 40000 {
		data, md := value(i), value(i/10)
		out, err := event.Prepare("b", []event.Input{{Type: "a", Data: json.RawMessage(data), Metadata: json.RawMessage(md)}}, event.Limits{})
		wantData, wantErr := oldCompactJSON("data", json.RawMessage(data), true)
		var wantMd json.RawMessage
		if wantErr == nil {
			wantMd, wantErr = oldCompactJSON("metadata", json.RawMessage(md), false)
		}
		if wantErr != nil {
			if err == nil || err.Error() != "events[0]: "+wantErr.Error() {
				t.Fatalf("data %q metadata %q: got %v, want events[0]: %v", data, md, err, wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("data %q metadata %q: %v", data, md, err)
		}
		if !bytes.Equal(out[0].Data, wantData) || !bytes.Equal(out[0].Metadata, wantMd) || (out[0].Metadata == nil) != (wantMd == nil) {
			t.Fatalf("data %q metadata %q: got %q and %q, want %q and %q", data, md, out[0].Data, out[0].Metadata, wantData, wantMd)
		}
	}
}

// TestPrepareKeepsCompactBytes: compact data is not copied, and the bytes
// Prepare returns cannot be appended into the caller's.
func TestPrepareKeepsCompactBytes(t *testing.T) {
	t.Parallel()
	buf := []byte(`{"a":[1,"<>&"]}{"tail":1}`)
	data := json.RawMessage(buf[:15])
	out, err := event.Prepare("b", []event.Input{{Type: "a", Data: data}}, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if &out[0].Data[0] != &buf[0] || string(out[0].Data) != `{"a":[1,"<>&"]}` {
		t.Fatalf("got %q, a copy or other bytes", out[0].Data)
	}
	_ = append(out[0].Data, 'x')
	if string(buf[15:]) != `{"tail":1}` {
		t.Fatalf("an append to the prepared data wrote into the caller's bytes: %q", buf)
	}
	spaced := json.RawMessage(`{"a": 1}`)
	out, err = event.Prepare("b", []event.Input{{Type: "a", Data: spaced}}, event.Limits{})
	if err != nil || string(out[0].Data) != `{"a":1}` || string(spaced) != `{"a": 1}` {
		t.Fatalf("got %q, %v; the input is now %q", out[0].Data, err, spaced)
	}
}

// TestEqualAcrossHTMLEscaping: the test of an idempotent retry takes data
// and metadata that differ only in encoding/json's HTML escaping (what the
// Go client sent before issue 22) as the same, and nothing else.
func TestEqualAcrossHTMLEscaping(t *testing.T) {
	t.Parallel()
	stored := event.Event{ID: "i", Type: "a", Data: json.RawMessage(`{"h":"\u003cb\u003e\u0026\u2028"}`), Metadata: json.RawMessage(`["\u003e"]`)}
	for _, c := range []struct {
		data, md string
		same     bool
	}{
		{`{"h":"\u003cb\u003e\u0026\u2028"}`, `["\u003e"]`, true},
		{`{"h":"<b>&` + "\u2028" + `"}`, `[">"]`, true},
		{`{"h":"<b>\u0026` + "\u2028" + `"}`, `["\u003e"]`, true},
		{`{"h":"<i>&` + "\u2028" + `"}`, `[">"]`, false},
		{`{"h":"<b>&"}`, `[">"]`, false},
		{`{"h":"\u003Cb\u003E\u0026\u2028"}`, `["\u003e"]`, false}, // not how encoding/json escapes
		{`{"h":"<b>&` + "\u2028" + `"}`, `["<"]`, false},
	} {
		in := event.Input{ID: "i", Type: "a", Data: json.RawMessage(c.data), Metadata: json.RawMessage(c.md)}
		if got := in.Equal(&stored); got != c.same {
			t.Errorf("Equal(%s %s, %s %s) = %v, want %v", c.data, c.md, stored.Data, stored.Metadata, got, c.same)
		}
	}
}
