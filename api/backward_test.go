package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// TestBackwardReadThroughAPI: {"backwards": true} reads newest first,
// below "before" (0 or absent: from the head), with the limit and query of
// a forward read, over a real embedded NATS.
func TestBackwardReadThroughAPI(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	in := []orisun.Input{
		{Type: "order.placed", Data: json.RawMessage(`{"o":1}`), Tags: []string{"order:1"}},
		{Type: "order.placed", Data: json.RawMessage(`{"o":2}`), Tags: []string{"order:2"}},
		{Type: "order.paid", Data: json.RawMessage(`{"o":1}`), Tags: []string{"order:1"}},
		{Type: "order.placed", Data: json.RawMessage(`{"o":3}`), Tags: []string{"order:3"}},
		{Type: "order.shipped", Data: json.RawMessage(`{"o":1}`), Tags: []string{"order:1"}},
	}
	res, err := n.Append(context.Background(), "default", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		body string
		want []uint64
	}{
		{`{"backwards":true}`, []uint64{5, 4, 3, 2, 1}},
		{`{"backwards":true,"before":0,"limit":2}`, []uint64{5, 4}},
		{`{"backwards":true,"before":4,"limit":2}`, []uint64{3, 2}},
		{`{"backwards":true,"before":2}`, []uint64{1}},
		{`{"backwards":true,"before":1}`, []uint64{}},
		{`{"backwards":true,"before":6}`, []uint64{5, 4, 3, 2, 1}},
		{`{"backwards":true,"before":1000,"limit":1}`, []uint64{5}},
		{`{"backwards":true,"after":0,"before":3}`, []uint64{2, 1}}, // after 0 is no after
		{`{"backwards":true,"query":{"items":[{"tags":["order:1"]}]}}`, []uint64{5, 3, 1}},
		{`{"backwards":true,"before":5,"query":{"items":[{"types":["order.placed"]}]},"limit":2}`, []uint64{4, 2}},
		{`{"backwards":false,"after":3}`, []uint64{4, 5}}, // false is a forward read
	} {
		var rd api.ReadReply
		ok(t, nc, "orisun.api.read.default", c.body, &rd)
		got := make([]uint64, 0, len(rd.Events))
		for _, e := range rd.Events {
			got = append(got, e.Position)
			if e.Epoch != res.Epoch || e.Boundary != "default" {
				t.Fatalf("%s: event %+v is not of the boundary's epoch %s", c.body, e, res.Epoch)
			}
			if string(e.Data) != string(in[e.Position-1].Data) || e.Type != in[e.Position-1].Type {
				t.Fatalf("%s: event at %d is %s %s, want what was appended there", c.body, e.Position, e.Type, e.Data)
			}
		}
		if !slices.Equal(got, c.want) || rd.Head != 5 || rd.Epoch != res.Epoch || rd.Events == nil {
			t.Fatalf("%s: positions %v, head %d, epoch %s; want %v, head 5, epoch %s", c.body, got, rd.Head, rd.Epoch, c.want, res.Epoch)
		}
	}
}

// TestBackwardReadPageFitsMaxPayload: a backward page that would not fit
// one NATS message is cut short, keeping the newest events; reading on
// below its last position yields every position once, newest first (I1).
func TestBackwardReadPageFitsMaxPayload(t *testing.T) {
	t.Parallel()
	n, nc := setup(t)
	appendBig(t, n)
	var got []uint64
	before, pages := uint64(0), 0
	for {
		rd := readPage(t, nc, fmt.Sprintf(`{"backwards":true,"before":%d,"limit":10000}`, before))
		if len(rd.Events) == 0 {
			break
		}
		pages++
		for _, e := range rd.Events {
			if (before > 0 && e.Position >= before) || len(got) >= 20 {
				t.Fatalf("backward page before %d holds position %d (read so far: %v)", before, e.Position, got)
			}
			got = append(got, e.Position)
		}
		before = rd.Events[len(rd.Events)-1].Position
	}
	want := make([]uint64, 20)
	for i := range want {
		want[i] = uint64(20 - i)
	}
	if !slices.Equal(got, want) || pages < 3 {
		t.Fatalf("read backward %v in %d pages, want %v in 3 or more", got, pages, want)
	}
}

// TestNodeReadBackward: the embedding Node's ReadBackward checks the limit,
// the query and the name as Read does.
func TestNodeReadBackward(t *testing.T) {
	t.Parallel()
	n, _ := setup(t)
	ctx := context.Background()
	if _, err := n.Append(ctx, "default", []orisun.Input{{Type: "a", Data: json.RawMessage(`1`)}, {Type: "b", Data: json.RawMessage(`2`)}}, nil); err != nil {
		t.Fatal(err)
	}
	_, events, err := n.ReadBackward(ctx, "default", 0, 10, &orisun.Query{Items: []orisun.QueryItem{{Types: []string{"a"}}}})
	if err != nil || len(events) != 1 || events[0].Position != 1 {
		t.Fatalf("ReadBackward by type: %+v, %v", events, err)
	}
	for _, c := range []struct {
		boundary string
		limit    int
		q        *orisun.Query
		want     error
	}{
		{"default", 0, nil, event.ErrInvalid},
		{"default", 10001, nil, event.ErrInvalid},
		{"default", 10, &orisun.Query{Items: []orisun.QueryItem{{Tags: []string{""}}}}, event.ErrInvalid},
		{"Bad", 10, nil, event.ErrInvalid},
		{"nosuch", 10, nil, event.ErrNotFound},
	} {
		if _, _, err := n.ReadBackward(ctx, c.boundary, 0, c.limit, c.q); !errors.Is(err, c.want) {
			t.Fatalf("ReadBackward(%q, limit %d, %+v): %v, want %v", c.boundary, c.limit, c.q, err, c.want)
		}
	}
}
