// Package event holds the domain types of orisun (events, boundaries, queries,
// conditions) and the validation every append goes through before anything
// is written. It imports nothing of the rest of orisun, so every other package
// (the store seam, the publisher, subscriptions, clients) can share it.
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
// message and the shape the read API returns (DESIGN §11).
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

// Query selects events: an event matches when it matches any item. An empty
// query (no items) matches every event.
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
// position After (DESIGN §4).
type Condition struct {
	Query Query  `json:"query"`
	After uint64 `json:"after"`
}

// AppendResult says where an append landed. First and Last are equal for a
// one-event append.
type AppendResult struct {
	Epoch string `json:"epoch"`
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}
