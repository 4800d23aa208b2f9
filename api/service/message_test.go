package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// TestClientMessage: a client is told the detail of an error and the
// fields it names, once, without its code's word again, the operation it
// asked for or the store behind the node (issue 18: "conflict: append to
// "default": sqlite: append to "default": conflict: …" reached clients).
// The errors are built as the node and the backends build them.
func TestClientMessage(t *testing.T) {
	const id = "0190b0a0-0000-7000-8000-00000000000a"
	_, badType := event.Prepare("default", []event.Input{{Type: "bad type", Data: []byte("1")}}, event.Limits{})
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a stored id with other content, through SQLite",
			fmt.Errorf("append to %q: %w", "default", fmt.Errorf("sqlite: append to %q: %w", "default",
				fmt.Errorf("%w: events[%d].id %s is already stored at position %d with other content", event.ErrConflict, 0, id, 1))),
			"events[0].id " + id + " is already stored at position 1 with other content"},
		{"a missing boundary, through PostgreSQL",
			fmt.Errorf("append to %q: %w", "nosuch", fmt.Errorf("postgres: %s: %w: boundary %q does not exist; create it first",
				`append to "nosuch"`, event.ErrNotFound, "nosuch")),
			`boundary "nosuch" does not exist; create it first`},
		{"a bad type: the event and the field stay",
			fmt.Errorf("append to %q: %w", "default", badType),
			`events[0]: type: type "bad type": byte 3 (' ') is not allowed`},
		{"a query",
			fmt.Errorf("read %q: %w", "default", fmt.Errorf("query: %w", fmt.Errorf("query item %d: %w", 0, event.ValidateType("*")))),
			`query: query item 0: type "*": byte 0`},
		{"a limit",
			fmt.Errorf("%w: limit: %d is below the minimum 1", event.ErrInvalid, 0),
			"limit: 0 is below the minimum 1"},
		{"a user's text that holds a code word",
			fmt.Errorf("append to %q: %w", "default", fmt.Errorf("%w: tag %q contains a NUL byte", event.ErrInvalid, "invalid: \x00")),
			`tag "invalid: \x00" contains a NUL byte`},
		{"a changed epoch keeps its words",
			fmt.Errorf("read %q: %w: the boundary's epoch is a, not b", "default", event.ErrEpochChanged),
			"epoch changed: the boundary's epoch is a, not b"},
		{"a timeout in the store",
			fmt.Errorf("postgres: append to %q: %w", "default", context.DeadlineExceeded),
			"the node did not finish the request in time"},
		{"an internal error says nothing of the store",
			errors.New("postgres: append to \"default\": the append wrote nothing"),
			"internal error; the orisun node's log has the detail"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := api.CodeOf(c.err)
			got := clientMessage(c.err, code)
			if !strings.HasPrefix(got, c.want) {
				t.Errorf("clientMessage(%q) = %q, want it to begin %q", c.err, got, c.want)
			}
			for _, leak := range []string{"sqlite", "postgres", "append to"} {
				if strings.Contains(got, leak) {
					t.Errorf("clientMessage(%q) = %q names %q", c.err, got, leak)
				}
			}
			if strings.HasPrefix(got, code+":") || strings.HasPrefix(got, strings.ReplaceAll(code, "_", " ")+":") {
				t.Errorf("clientMessage(%q) = %q repeats the code", c.err, got)
			}
		})
	}
}
