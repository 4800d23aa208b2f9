package stream_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/stream"
)

// sizeByMessage is what EncodedSize must equal: the size of the message
// Message builds for the input at the widest position and time, with
// Nats-Msg-Id, plus the expected-last-sequence header (a uint64) and the
// header block's framing. EncodedSize once built this message for every
// appended event.
func sizeByMessage(boundary string, in *event.Input) int {
	e := event.Event{ID: in.ID, Boundary: boundary, Epoch: "00000000-0000-0000-0000-000000000000", Position: math.MaxUint64,
		Type: in.Type, Time: time.Date(2006, 1, 2, 15, 4, 5, 999999999, time.UTC), Tags: in.Tags, Data: in.Data, Metadata: in.Metadata}
	if e.Tags == nil {
		e.Tags = []string{}
	}
	m, err := stream.Message(&e, true)
	if err != nil {
		return math.MaxInt
	}
	size := len(m.Data) + len(m.Subject)
	for k, vs := range m.Header {
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
	}
	return size + len("NATS/1.0\r\n") + len(jetstream.ExpectedLastSeqHeader) + 20 + 4 + 2
}

// TestEncodedSizeCounts: the size EncodedSize counts is the size of the
// message it stands for, whatever the strings hold (escaped characters,
// non-ASCII, empty), with and without tags, data and metadata.
func TestEncodedSizeCounts(t *testing.T) {
	t.Parallel()
	for _, in := range []event.Input{
		{ID: event.NewID(), Type: "order.placed", Data: json.RawMessage(`{"a":1}`)},
		{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{"a":"` + strings.Repeat("x", 5000) + `"}`),
			Metadata: json.RawMessage(`{"m":true}`), Tags: []string{"t1", "t2"}},
		{Type: "t", Tags: []string{}},
		{ID: "not-a-uuid", Type: "a.b-c:d", Tags: []string{`quote"`, `back\slash`, "<html>&", "ünïcødé", "tab\there", "nl\n", "\u2028", ""}},
		{ID: event.NewID(), Type: "ü.type", Data: json.RawMessage(`"just a string"`), Metadata: json.RawMessage(`{"m":"\u00e9"}`)},
	} {
		for _, boundary := range []string{"default", "b", "a_long_boundary_name_0123456789"} {
			if got, want := stream.EncodedSize(boundary, &in), sizeByMessage(boundary, &in); got != want {
				t.Errorf("EncodedSize(%q, %+v) = %d, the message is %d", boundary, in, got, want)
			}
		}
	}
}

// FuzzEncodedSize: EncodedSize equals the size of the message for any
// strings an append may carry (it turns user input into a size that
// decides whether the event is stored).
func FuzzEncodedSize(f *testing.F) {
	f.Add("default", event.NewID(), "order.placed", "customer:42", `{"a":1}`, "")
	f.Add("b", "", "t", `"<&>"`, `"ü"`, `{"m":null}`)
	f.Fuzz(func(t *testing.T, boundary, id, typ, tag, data, metadata string) {
		in := event.Input{ID: id, Type: typ, Tags: []string{tag, tag + "x"}, Data: json.RawMessage(data), Metadata: json.RawMessage(metadata)}
		if got, want := stream.EncodedSize(boundary, &in), sizeByMessage(boundary, &in); got != want {
			t.Fatalf("EncodedSize(%q, %+v) = %d, the message is %d", boundary, in, got, want)
		}
	})
}

// BenchmarkEncodedSize: counting (EncodedSize) against building the
// message (what it did before), for one event of 1 KB; and event.Prepare
// of one such event with each (docs/performance.md).
func BenchmarkEncodedSize(b *testing.B) {
	data := json.RawMessage(`{"customer":"c-000042","amount":1234,"note":"` + strings.Repeat("a", 1024-48) + `"}`)
	in := event.Input{ID: event.NewID(), Type: "bench.event", Data: data, Tags: []string{"bench"}}
	for _, c := range []struct {
		name string
		size func(string, *event.Input) int
	}{{"count", stream.EncodedSize}, {"message", sizeByMessage}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.size("default", &in)
			}
		})
		b.Run("prepare-"+c.name, func(b *testing.B) {
			lim := event.Limits{MaxAppendEvents: 10_000, MaxAppendBytes: 32 << 20, MaxEventBytes: 1 << 20, EncodedSize: c.size}
			events := []event.Input{in}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := event.Prepare("default", events, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
