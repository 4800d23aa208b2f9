package service

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/orisun-io/orisun/api"
)

// codeWords are the words by which an error's text says its code: the
// texts of package event's sentinels, which open the detail an error was
// made with ("conflict: events[0].id … is already stored …"). A word
// marked keep stays in the message: it says more than the code does
// (an epoch that changed is an invalid request; a store that closed is
// unavailable).
var codeWords = map[string][]struct {
	word string
	keep bool
}{
	api.CodeInvalid:     {{"invalid", false}, {"epoch changed", true}},
	api.CodeNotFound:    {{"not found", false}},
	api.CodeConflict:    {{"conflict", false}},
	api.CodeTooLarge:    {{"too large", false}},
	api.CodeUnavailable: {{"unavailable", false}, {"closed", true}},
	api.CodeCorrupt:     {{"corrupt", false}},
}

// backendSegment is a store's name as the start of its errors' context.
var backendSegment = regexp.MustCompile(`^(sqlite|postgres|fdb)$`)

// backendName is how a store prefixes its errors.
var backendName = regexp.MustCompile(`\b(sqlite|postgres|fdb): `)

// clientMessage is what a client is told of err, whose code is code: the
// detail the error was made with, after its code's word, and the fields of
// the request it names; not the operation the client knows it asked for
// and not the store behind the node (the node's log has the whole error).
// So a client reads "conflict: events[0].id … is already stored at
// position 1 with other content", not "conflict: append to "default":
// sqlite: append to "default": conflict: events[0].id …".
func clientMessage(err error, code string) string {
	if code == api.CodeInternal {
		return "internal error; the orisun node's log has the detail"
	}
	msg := err.Error()
	at, word, keep := -1, "", false
	for _, w := range codeWords[code] {
		if i := strings.Index(msg, w.word+": "); i >= 0 && (at < 0 || i < at) {
			at, word, keep = i, w.word, w.keep
		}
	}
	if at < 0 {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return "the node did not finish the request in time (" + context.DeadlineExceeded.Error() + "); send it again"
		case errors.Is(err, context.Canceled):
			return "the request was cancelled on the node (it is stopping); send it again"
		}
		return backendName.ReplaceAllString(msg, "")
	}
	detail := msg[at+len(word)+2:]
	if keep {
		detail = msg[at:]
	}
	return fieldContext(msg[:at]) + detail
}

// fieldContext keeps the trailing segments of an error's context that say
// where in the request the error is ("append to "default": events[0]:
// type: " keeps "events[0]: type: "; "query: query item 0: " stays whole).
// A segment that quotes a name is the operation ("append to "default"",
// the client knows what it asked), and the store's name is the node's
// business: there the kept context ends.
func fieldContext(head string) string {
	segs := strings.Split(strings.TrimSuffix(head, ": "), ": ")
	i := len(segs)
	for i > 0 && segs[i-1] != "" && !strings.Contains(segs[i-1], `"`) && !backendSegment.MatchString(segs[i-1]) {
		i--
	}
	if i == len(segs) {
		return ""
	}
	return strings.Join(segs[i:], ": ") + ": "
}
