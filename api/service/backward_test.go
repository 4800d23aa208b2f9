package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/orisun-io/orisun/api/service"
	"github.com/orisun-io/orisun/event"
)

// resetBetween is a boundary reset between the service's two reads of a
// backward read: the head is the old epoch's (500), the events the new
// one's (positions 10 down to 1).
type resetBetween struct {
	service.Backend
	old, now string
}

func (b resetBetween) Boundary(_ context.Context, name string) (event.Boundary, error) {
	return event.Boundary{Name: name, Epoch: b.old, Head: 500}, nil
}

func (b resetBetween) ReadBackward(_ context.Context, name string, before uint64, limit int, _ *event.Query) (string, []event.Event, error) {
	var evs []event.Event
	for p := uint64(10); p >= 1 && len(evs) < limit; p-- {
		if before > 0 && p >= before {
			continue
		}
		evs = append(evs, event.Event{ID: fmt.Sprintf("0190f0c0-0000-7000-8000-%012d", p), Boundary: name, Epoch: b.now, Position: p,
			Type: "t", Time: time.Unix(1_700_000_000, 0).UTC(), Tags: []string{}, Data: json.RawMessage(`{}`)})
	}
	return b.now, evs, nil
}

// TestReadBackwardAcrossReset: the head of a backward read's reply is of
// the events' epoch. A boundary reset between the service's read of the
// head and its read of the events made the reply say head 500 of the old
// epoch with the new epoch's events 10…1, which the client's checks
// rightly refuse (a read without a query from the head has every position
// from the head down): the reply's head is now the highest event's.
func TestReadBackwardAcrossReset(t *testing.T) {
	be := resetBetween{old: "0190f0c0-0000-7000-8000-00000000000a", now: "0190f0c0-0000-7000-8000-00000000000b"}
	c := goClient(t, serve(t, "backward-api", be, service.Config{}))
	for _, before := range []uint64{0, 6} {
		res, err := c.ReadBackward(context.Background(), "b", before, 50, nil)
		if err != nil {
			t.Fatalf("before %d: a correct reply after a reset refused: %v", before, err)
		}
		if before == 0 && (res.Head != 10 || len(res.Events) != 10) || before == 6 && (len(res.Events) != 5 || res.Events[0].Position != 5) {
			t.Fatalf("before %d: head %d, %d events, want head 10 and the new epoch's events", before, res.Head, len(res.Events))
		}
	}
}
