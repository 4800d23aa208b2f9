package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/event"
)

// resetWhileRead is a boundary reset between the service's read of the
// head and its read of the events of a forward read: the first answers
// the old epoch's head (500), the events and any read of the boundary
// after them are of the new epoch (positions 1 to 10).
type resetWhileRead struct {
	service.Backend
	old, now string
	read     *atomic.Bool // events were read since the last Boundary
	// again, when set, is the epoch of a second reset after the events
	// were read: the read of the boundary after them finds it, head 0.
	again string
}

func (b resetWhileRead) Boundary(_ context.Context, name string) (event.Boundary, error) {
	if b.read.Swap(false) {
		if b.again != "" {
			return event.Boundary{Name: name, Epoch: b.again, Head: 0}, nil
		}
		return event.Boundary{Name: name, Epoch: b.now, Head: 10}, nil
	}
	return event.Boundary{Name: name, Epoch: b.old, Head: 500}, nil
}

func (b resetWhileRead) Read(_ context.Context, name string, after uint64, limit int, _ *event.Query) (string, []event.Event, error) {
	b.read.Store(true)
	var evs []event.Event
	for p := after + 1; p <= 10 && len(evs) < limit; p++ {
		evs = append(evs, event.Event{ID: fmt.Sprintf("0190f0c0-0000-7000-8000-%012d", p), Boundary: name, Epoch: b.now, Position: p,
			Type: "t", Time: time.Unix(1_700_000_000, 0).UTC(), Tags: []string{}, Data: json.RawMessage(`{}`)})
	}
	return b.now, evs, nil
}

// TestReadForwardAcrossReset: the head of a forward read's reply is of the
// events' epoch. A reset between the service's read of the head and of the
// events made the reply say head 500 of the old epoch with the new epoch's
// events: a reader went on to ask after 10 and was refused as a bad reply
// ("no events after position 10, though the head is 500"). Now the reply's
// head is the new epoch's, and a position past it is refused as invalid,
// as it is without a reset.
func TestReadForwardAcrossReset(t *testing.T) {
	be := resetWhileRead{old: "0190f0c0-0000-7000-8000-00000000000a", now: "0190f0c0-0000-7000-8000-00000000000b", read: new(atomic.Bool)}
	c := goClient(t, serve(t, "forward-api", be, service.Config{}))
	ctx := context.Background()
	res, err := c.Read(ctx, "b", 5, 50, nil)
	if err != nil {
		t.Fatalf("after 5: a correct reply after a reset refused: %v", err)
	}
	if res.Head != 10 || len(res.Events) != 5 || res.Epoch != be.now {
		t.Fatalf("after 5: head %d, %d events of epoch %s, want head 10 and the new epoch's 5 events", res.Head, len(res.Events), res.Epoch)
	}
	_, err = c.Read(ctx, "b", 20, 50, nil)
	if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "past the head 10") {
		t.Fatalf("after 20 across a reset to a head of 10: %v, want invalid: past the head 10", err)
	}
}

// TestReadForwardAcrossTwoResets: reset again while a read crossed a
// reset, the boundary's head is of a third epoch, which says nothing of
// the events read: the reply is not refused against it ("past the head
// 0"), and its head is the highest position returned.
func TestReadForwardAcrossTwoResets(t *testing.T) {
	be := resetWhileRead{old: "0190f0c0-0000-7000-8000-00000000000a", now: "0190f0c0-0000-7000-8000-00000000000b",
		again: "0190f0c0-0000-7000-8000-00000000000c", read: new(atomic.Bool)}
	c := goClient(t, serve(t, "forward-api-twice", be, service.Config{}))
	res, err := c.Read(context.Background(), "b", 5, 50, nil)
	if err != nil {
		t.Fatalf("after 5 across two resets: a correct reply refused: %v", err)
	}
	if res.Head != 10 || len(res.Events) != 5 || res.Epoch != be.now {
		t.Fatalf("after 5 across two resets: head %d, %d events of epoch %s, want head 10 and the second epoch's 5 events",
			res.Head, len(res.Events), res.Epoch)
	}
}
