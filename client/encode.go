package client

import (
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/eventjson"
)

// encodeAppend writes the body of an append request: what json.Marshal of
// an api.AppendRequest writes, field for field (TestEncodeAppend holds it
// to that), but with data and
// metadata as the application gave them when they are compact JSON (most
// are), and nothing HTML-escaped. json.Marshal compacts a json.RawMessage
// again and turns `<`, `>`, `&`, U+2028 and U+2029 in its strings into
// \u escapes: 38% of the client's CPU in docs/performance.md ("The users'
// path"), and an event appended through this client was stored with other
// bytes than the same event sent by any other NATS client. Data or
// metadata that is not JSON is an error naming the event and the field.
func encodeAppend(events []event.Input, cond *event.Condition) ([]byte, error) {
	b := make([]byte, 0, eventjson.Size(events))
	b = append(b, `{"events":`...)
	b, err := eventjson.AppendEvents(b, events)
	if err != nil {
		return nil, err
	}
	if cond != nil {
		b = append(b, `,"condition":`...)
		if b, err = eventjson.AppendJSON(b, cond); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}
