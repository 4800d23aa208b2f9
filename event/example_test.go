package event_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// An event matches a query when it matches any item; an item matches when
// the event's type is one of its types (any type when none is given) and
// the event carries every one of its tags.
func ExampleQuery_Matches() {
	q := &event.Query{Items: []event.QueryItem{
		{Types: []string{"seat.booked", "seat.released"}, Tags: []string{"seat:1"}},
		{Tags: []string{"show:9"}},
	}}
	for _, e := range []event.Event{
		{Type: "seat.booked", Tags: []string{"seat:1", "show:8"}},
		{Type: "seat.booked", Tags: []string{"seat:2"}},
		{Type: "show.cancelled", Tags: []string{"show:9"}},
	} {
		fmt.Println(e.Type, e.Tags, q.Matches(&e))
	}
	// Output:
	// seat.booked [seat:1 show:8] true
	// seat.booked [seat:2] false
	// show.cancelled [show:9] true
}

// Prepare checks an append before anything is written and names what is
// wrong: which event, which field, which limit.
func ExamplePrepare() {
	_, err := event.Prepare("default", []event.Input{
		{Type: "seat.booked", Data: json.RawMessage(`{"seat":1}`)},
		{Type: "seat booked", Data: json.RawMessage(`{"seat":2}`)},
	}, event.Limits{MaxAppendEvents: 100})
	fmt.Println(err)
	fmt.Println(errors.Is(err, event.ErrInvalid))
	// Output:
	// events[1]: type: invalid: type "seat booked": byte 4 (' ') is not allowed; use letters, digits, '_', '-', ':' and '.' between tokens
	// true
}
