package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
)

// TestDataStoredAsSent: the client sends data as the application gave it,
// so `<`, `>` and `&` are stored as they are, not as \u003c…; and an event
// stored by a client of before (which escaped them) is still the same event
// when it is sent again now: an idempotent retry returns its position,
// while other content under its id is a conflict.
func TestDataStoredAsSent(t *testing.T) {
	t.Parallel()
	n, c := startNodeAndClient(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	data := `{"html":"<b>Tom & Jerry</b>"}`
	res, err := c.Append(ctx, "default", []event.Input{{Type: "a", Data: json.RawMessage(data)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.Read(ctx, "default", 0, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := page.Events; len(got) != 1 || string(got[0].Data) != data {
		t.Fatalf("stored %+v, want data %q", page.Events, data)
	}

	// What a client of before sent for the same event: json.Marshal's
	// HTML escaping.
	const id = "0190b0a0-0000-7000-8000-00000000000a"
	escaped := `{"html":"\u003cb\u003eTom \u0026 Jerry\u003c/b\u003e"}`
	old, err := n.Append(ctx, "default", []event.Input{{ID: id, Type: "a", Data: json.RawMessage(escaped), Metadata: json.RawMessage(`{"by":"\u003cold\u003e"}`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := c.Append(ctx, "default", []event.Input{{ID: id, Type: "a", Data: json.RawMessage(data), Metadata: json.RawMessage(`{"by":"<old>"}`)}}, nil)
	if err != nil || retry != old || old.First != res.First+1 {
		t.Fatalf("the retry of an event stored with escapes: %+v, %v; stored at %+v", retry, err, old)
	}
	_, err = c.Append(ctx, "default", []event.Input{{ID: id, Type: "a", Data: json.RawMessage(`{"html":"<i>Tom & Jerry</i>"}`)}}, nil)
	if !errors.Is(err, event.ErrConflict) {
		t.Fatalf("other content under a stored id: %v, want a conflict", err)
	}
	if b, err := c.Boundaries(ctx); err != nil || b[0].Head != old.Last {
		t.Fatalf("boundaries %+v, %v: want the head at %d", b, err, old.Last)
	}
}
