// Package event holds the domain types of orisun (events, boundaries, queries,
// conditions) and the validation every append goes through before anything
// is written. It imports nothing of the rest of orisun, so every other package
// (the store seam, the publisher, subscriptions, clients) can share it.
// It is part of orisun's stable public API (see package orisun).
package event

import (
	"encoding/json"
	"time"
)

// Input is an event as an application appends it.
type Input struct {
	// ID is a UUID. Empty means "generate a time-ordered UUIDv7".
	ID string `json:"id,omitempty"`
	// Type names the event; it becomes the subject tail in JetStream.
	Type string `json:"type"`
	// Data is the event's payload, a JSON value.
	Data json.RawMessage `json:"data"`
	// Metadata is optional JSON.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Tags are optional strings used by queries and conditions.
	Tags []string `json:"tags,omitempty"`
}

// Event is a stored event. Its JSON form is the body of the JetStream
// message and the shape the read API returns (docs/design.md §11).
type Event struct {
	ID       string          `json:"id"`
	Boundary string          `json:"boundary"`
	Epoch    string          `json:"epoch"`
	Position uint64          `json:"position"`
	Type     string          `json:"type"`
	Time     time.Time       `json:"time"`
	Tags     []string        `json:"tags"`
	Data     json.RawMessage `json:"data"`
	Metadata json.RawMessage `json:"metadata"`
}

// Boundary is one ordered log with its own dense positions and epoch.
type Boundary struct {
	Name  string `json:"name"`
	Epoch string `json:"epoch"`
	// Head is the position of the last committed event (0: none yet).
	Head uint64 `json:"head"`
}

// Query selects events: an event matches when it matches any item.
//
// The empty query: a nil *Query and a Query with no items both match every
// event, and so does an item with neither types nor tags (it constrains
// nothing). Read with it is a plain read; a condition with it fails on any
// event after its position, which is the optimistic "expected head" check
// of a whole boundary. (An OR of no items could also mean "matches
// nothing", but a condition that silently never fails is the worse
// surprise: a user who sends no items gets the strictest check, not none.)
// See docs/queries.md.
type Query struct {
	Items []QueryItem `json:"items"`
}

// QueryItem matches an event whose type is one of Types (any type when Types
// is empty) and which carries every tag in Tags.
type QueryItem struct {
	Types []string `json:"types,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// Matches reports whether e matches the query.
func (q *Query) Matches(e *Event) bool {
	if q == nil || len(q.Items) == 0 {
		return true
	}
	for _, it := range q.Items {
		if it.matches(e) {
			return true
		}
	}
	return false
}

func (it QueryItem) matches(e *Event) bool {
	if len(it.Types) > 0 {
		found := false
		for _, t := range it.Types {
			if t == e.Type {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for _, want := range it.Tags {
		found := false
		for _, have := range e.Tags {
			if have == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Condition makes an append fail when any event matching Query exists after
// position After (docs/design.md §4).
type Condition struct {
	Query Query  `json:"query"`
	After uint64 `json:"after"`
}

// Latest is the answer of a read-latest: the last event matching a query
// and the boundary's head, read in one snapshot. It is the context of a
// decision: the application decides from Event (nil when nothing matches)
// and appends under Condition{Query: q, After: Head}, which fails if any
// event matching q was appended since (docs/design.md §4).
type Latest struct {
	Epoch string `json:"epoch"`
	// Head is the boundary's last committed position when Event was read.
	Head uint64 `json:"head"`
	// Event is the matching event with the highest position; nil: none.
	Event *Event `json:"event"`
}

// AppendResult says where an append landed. First and Last are equal for a
// one-event append.
type AppendResult struct {
	Epoch string `json:"epoch"`
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}
