package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/orisun-io/orisun/event"
)

// TestRetry pins the judgement of an append whose ids are stored
// (docs/design.md §3) and the texts both backends return for it.
func TestRetry(t *testing.T) {
	in := func(id, data string) event.Input {
		return event.Input{ID: id, Type: "order.placed", Data: json.RawMessage(data), Tags: []string{"order:1"}}
	}
	stored := func(pos uint64, e event.Input) event.Event {
		return event.Event{ID: e.ID, Position: pos, Type: e.Type, Data: e.Data, Tags: e.Tags}
	}
	a, b, c := in("a", `{"n":1}`), in("b", `{"n":2}`), in("c", `{"n":3}`)
	db := map[string]event.Event{"a": stored(4, a), "b": stored(5, b)}

	first, last, err := Retry([]event.Input{a, b}, db)
	if err != nil || first != 4 || last != 5 {
		t.Fatalf("Retry(a, b) = %d..%d, %v; want the stored positions 4..5", first, last, err)
	}
	for _, tc := range []struct {
		name   string
		events []event.Input
		want   string
	}{
		{"stored then new", []event.Input{a, b, c}, "events[0].id a is already stored at position 4 but events[2].id c is not; " +
			"a retry must resend exactly the events of the original append, new events need new ids"},
		{"other content", []event.Input{a, in("b", `{"n":9}`)}, "events[1].id b is already stored at position 5 with other content"},
		{"reordered", []event.Input{b, a}, "events[1].id a is stored at position 4, not right after events[0].id b " +
			"(position 5); a retry must resend the events in their original order"},
	} {
		_, _, err := Retry(tc.events, db)
		if !errors.Is(err, event.ErrConflict) || err.Error() != event.ErrConflict.Error()+": "+tc.want {
			t.Errorf("Retry(%s) = %v; want ErrConflict: %s", tc.name, err, tc.want)
		}
	}
}

// TestRequestAbandoned: a request whose caller gave up before a writer
// took it is never taken, so nothing of it is written.
func TestRequestAbandoned(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r := NewRequest(ctx, "orders", nil, nil)
	cancel()
	if _, abandoned := r.Wait(); !abandoned {
		t.Fatal("Wait after the caller's context ended = not abandoned; want abandoned")
	}
	if r.Take() || r.Queued() || r.Taken() {
		t.Fatal("an abandoned request was taken (or reads as queued or taken)")
	}
}

// TestRequestTakenWaitsForOutcome: once a writer took a request, its
// caller gets the real outcome even when its context ends meanwhile.
func TestRequestTakenWaitsForOutcome(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r := NewRequest(ctx, "orders", nil, nil)
	if !r.Queued() || !r.Take() || !r.Taken() || r.Take() {
		t.Fatal("a queued request must be taken exactly once")
	}
	cancel()
	// The answer comes after Wait began, unless the scheduler runs this
	// goroutine first: then both the answer and the context's end are
	// ready, and either way Wait must return the answer.
	want := event.AppendResult{Epoch: "e", First: 7, Last: 7}
	go r.Answer(Reply{Res: want})
	rep, abandoned := r.Wait()
	if abandoned || rep.Err != nil || rep.Res != want {
		t.Fatalf("Wait = %+v, abandoned %v; want %+v: a taken request is answered with its outcome", rep, abandoned, want)
	}
}

func TestIsDomain(t *testing.T) {
	if !IsDomain(errors.Join(errors.New("x"), event.ErrLeaseLost)) || !IsDomain(context.Canceled) {
		t.Fatal("IsDomain missed an error of the core")
	}
	if IsDomain(errors.New("driver: broken")) {
		t.Fatal("IsDomain took a driver's error for the core's")
	}
}

// closedDB is a DB whose only answer is whether the store is closed.
type closedDB struct {
	DB
	closed bool
}

func (d closedDB) Closed() bool { return d.closed }

// TestCheckAppend: an append of no events is invalid whatever the store;
// then a closed store refuses it, then a caller that gave up gets its
// context's error; an append that passes all three gets nil.
func TestCheckAppend(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	one := []event.Input{{Type: "t"}}
	for _, c := range []struct {
		name   string
		ctx    context.Context
		closed bool
		events []event.Input
		want   error
	}{
		{"no events, closed", done, true, nil, event.ErrInvalid},
		{"closed, caller gone", done, true, one, event.ErrClosed},
		{"caller gone", done, false, one, context.Canceled},
		{"admitted", context.Background(), false, one, nil},
	} {
		err := CheckAppend(c.ctx, closedDB{closed: c.closed}, c.events)
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
