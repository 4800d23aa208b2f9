package outbox

import (
	"errors"
	"testing"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// stateErr is an error of a driver other than pgx that tells its SQLSTATE
// by a method, as lib/pq's does, with the driver's prefix in its text.
type stateErr struct{ state, text string }

func (e stateErr) Error() string    { return e.text }
func (e stateErr) SQLState() string { return e.state }

// TestTranslateOtherDrivers: an error of class OR from a driver that is not
// pgx becomes the client's error too, its message without the driver's
// prefix; a serialization failure, deadlock, lock timeout, shutdown or lost
// connection is unavailable, as the client reports it, with the driver's
// error still wrapped; any other error stays the driver's, wrapped.
func TestTranslateOtherDrivers(t *testing.T) {
	err := translate("orisun_append to \"b\"", "b", nil,
		stateErr{"ORBIG", "pq: events[0]: tags: the event has 65 tags, the limit is 64"})
	var ae *api.Error
	if !errors.As(err, &ae) || !errors.Is(err, event.ErrTooLarge) || ae.Message != "events[0]: tags: the event has 65 tags, the limit is 64" {
		t.Fatalf("got %#v, want too_large with the function's message", err)
	}
	cond := &event.Condition{After: 3}
	err = translate("orisun_append to \"b\"", "b", cond,
		stateErr{"ORCFL", `pq: boundary "b": condition failed: an event matching the query exists at position 5 (after 3)`})
	var ce *event.ConflictError
	if !errors.As(err, &ce) || *ce != (event.ConflictError{Boundary: "b", After: 3, Position: 5}) {
		t.Fatalf("got %#v, want the conflict at position 5", err)
	}
	// What the store reports as unavailable (worth retrying) is
	// unavailable here too, the driver's error still wrapped.
	for _, state := range []string{"40001", "40P01", "55P03", "57P01", "08006"} {
		driverErr := stateErr{state, "pq: " + state}
		err := translate("op", "b", nil, driverErr)
		if !errors.Is(err, event.ErrUnavailable) || !errors.Is(err, driverErr) || !errors.As(err, &ae) || ae.Code != api.CodeUnavailable {
			t.Fatalf("SQLSTATE %s: %#v, want unavailable wrapping the driver's error", state, err)
		}
		var se stateErr
		if !errors.As(err, &se) || se.state != state {
			t.Fatalf("SQLSTATE %s: errors.As to the driver's error type fails: %v", state, err)
		}
	}
	other := stateErr{"42P01", "pq: relation does not exist"}
	if err := translate("op", "b", nil, other); errors.As(err, &ae) || !errors.Is(err, other) || errors.Is(err, event.ErrUnavailable) {
		t.Fatalf("an undefined table: %#v, want the driver's error wrapped, not unavailable", err)
	}
}
