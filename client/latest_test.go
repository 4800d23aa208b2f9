package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// TestReadLatestAndConflict: the client's read-latest and the decision
// appended under its condition, against a node on each backend: the
// answer of an empty boundary, of a match, of nothing matching; a second
// decision from the same read fails with an *event.ConflictError that
// names the boundary, the condition's position and the matching position.
func TestReadLatestAndConflict(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testReadLatestAndConflict(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: 20 * time.Millisecond})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		testReadLatestAndConflict(t, orisun.Config{DataDir: t.TempDir(), NATSPort: -1, PollInterval: 20 * time.Millisecond,
			Backend: "postgres", PGURL: pgtest.URL(t), LeaseTTL: time.Second})
	})
}

func testReadLatestAndConflict(t *testing.T, cfg orisun.Config) {
	cfg.Boundaries = []string{"seats"}
	c := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seat1 := &event.Query{Items: []event.QueryItem{{Tags: []string{"seat:1"}}}}
	l, err := c.ReadLatest(ctx, "seats", seat1)
	if err != nil || l.Event != nil || l.Head != 0 || l.Epoch == "" {
		t.Fatalf("latest of an empty boundary: %+v, %v", l, err)
	}
	if _, err := c.Append(ctx, "seats", []event.Input{
		{Type: "seat.booked", Data: []byte(`{"seat":1}`), Tags: []string{"seat:1"}},
		{Type: "seat.booked", Data: []byte(`{"seat":2}`), Tags: []string{"seat:2"}},
		{Type: "seat.released", Data: []byte(`{"seat":1}`), Tags: []string{"seat:1"}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	l, err = c.ReadLatest(ctx, "seats", seat1)
	if err != nil || l.Event == nil || l.Event.Position != 3 || l.Event.Type != "seat.released" || l.Head != 3 ||
		l.Event.Epoch != l.Epoch || string(l.Event.Data) != `{"seat":1}` {
		t.Fatalf("latest of seat:1: %+v (event %+v), %v", l, l.Event, err)
	}
	if all, err := c.ReadLatest(ctx, "seats", nil); err != nil || all.Event == nil || all.Event.Position != 3 {
		t.Fatalf("latest of any event: %+v, %v", all, err)
	}
	none, err := c.ReadLatest(ctx, "seats", &event.Query{Items: []event.QueryItem{{Tags: []string{"seat:9"}}}})
	if err != nil || none.Event != nil || none.Head != 3 {
		t.Fatalf("latest of nothing: %+v, %v", none, err)
	}
	if _, err := c.ReadLatest(ctx, "nosuch", nil); !errors.Is(err, event.ErrNotFound) {
		t.Fatalf("latest of an unknown boundary: %v, want not found", err)
	}
	if _, err := c.ReadLatest(ctx, "seats", &event.Query{Items: []event.QueryItem{{Types: []string{"a b"}}}}); !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("latest with an invalid query: %v, want invalid", err)
	}

	// Two decisions from the one read: the first lands, the second
	// conflicts at the first's position.
	cond := &event.Condition{Query: *seat1, After: l.Head}
	book := []event.Input{{Type: "seat.booked", Data: []byte(`{"seat":1}`), Tags: []string{"seat:1"}}}
	res, err := c.Append(ctx, "seats", book, cond)
	if err != nil || res.First != 4 {
		t.Fatalf("first decision: %+v, %v", res, err)
	}
	_, err = c.Append(ctx, "seats", book, cond)
	var ce *event.ConflictError
	if !errors.Is(err, event.ErrConflict) || !errors.As(err, &ce) {
		t.Fatalf("second decision: %v, want an *event.ConflictError", err)
	}
	if ce.Position != 4 || ce.After != 3 || ce.Boundary != "seats" {
		t.Fatalf("conflict %+v, want boundary seats, after 3, position 4", ce)
	}
	// An id stored with other content is a conflict without a position.
	stored, err := c.Read(ctx, "seats", 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(ctx, "seats", []event.Input{{ID: stored.Events[0].ID, Type: "seat.booked", Data: []byte(`{"seat":7}`)}}, nil)
	if !errors.Is(err, event.ErrConflict) || errors.As(err, &ce) {
		t.Fatalf("id with other content: %v, want a conflict that is no *event.ConflictError", err)
	}
}
