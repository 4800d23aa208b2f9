package service

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// codeWords are the words by which an error's text says its code: the
// texts of package event's sentinels, which open the detail an error was
// made with ("conflict: events[0].id … is already stored …"). A word
// marked keep stays in the message: it says more than the code does
// (an epoch that changed is an invalid request). Unavailable and internal
// errors are told in fixed words (clientMessage).
var codeWords = map[string][]struct {
	word string
	keep bool
}{
	api.CodeInvalid:  {{"invalid", false}, {"epoch changed", true}},
	api.CodeNotFound: {{"not found", false}},
	api.CodeConflict: {{"conflict", false}},
	api.CodeTooLarge: {{"too large", false}},
	api.CodeCorrupt:  {{"corrupt", false}},
}

// backendSegment is a store's name as the start of its errors' context.
var backendSegment = regexp.MustCompile(`^(sqlite|postgres|fdb)$`)

// backendName is how a store prefixes its errors.
var backendName = regexp.MustCompile(`\b(sqlite|postgres|fdb): `)

// The messages of an unavailable request. It is the node's business why
// (the store's own words may name its host, user, database or files), so
// a client is told only which of three it is and that it may send the
// request again; the node's log has the whole error.
const (
	msgDeadline    = "the node did not finish the request in time; send it again"
	msgStopping    = "the orisun node is stopping; send the request again"
	msgUnavailable = "the store is unavailable, or the node is still starting; send the request again " +
		"(with the same event ids, an append is stored once); the node's log says why"
)

// clientMessage is what a client is told of err, whose code is code: the
// detail the error was made with, after its code's word, and the fields of
// the request it names; not the operation the client knows it asked for
// and not the store behind the node (the node's log has the whole error).
// So a client reads "conflict: events[0].id … is already stored at
// position 1 with other content", not "conflict: append to "default":
// sqlite: append to "default": conflict: events[0].id …". An internal or
// unavailable error, and one in the database's own words
// (backend.StoreDetail), is told in fixed words.
func clientMessage(err error, code string) string {
	switch code {
	case api.CodeInternal:
		return "internal error; the orisun node's log has the detail"
	case api.CodeUnavailable:
		return unavailableMessage(err)
	}
	var sd *backend.StoreDetail
	if errors.As(err, &sd) {
		return "the store refused the request (" + strings.ReplaceAll(code, "_", " ") + "); the node's log has the store's words"
	}
	msg := err.Error()
	at, word, keep := -1, "", false
	for _, w := range codeWords[code] {
		if i := strings.Index(msg, w.word+": "); i >= 0 && (at < 0 || i < at) {
			at, word, keep = i, w.word, w.keep
		}
	}
	if at < 0 {
		return backendName.ReplaceAllString(msg, "")
	}
	detail := msg[at+len(word)+2:]
	if keep {
		detail = msg[at:]
	}
	return fieldContext(msg[:at]) + detail
}

// unavailableMessage says which kind of unavailable err is: a request the
// node did not finish in time, a node (or store) that is stopping, or
// anything else (the store failing, a node not yet started).
func unavailableMessage(err error) string {
	switch {
	case errors.Is(err, errDeadline), errors.Is(err, context.DeadlineExceeded):
		return msgDeadline
	case errors.Is(err, context.Canceled), errors.Is(err, event.ErrClosed), err.Error() == errStopping().Error():
		return msgStopping
	}
	return msgUnavailable
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
