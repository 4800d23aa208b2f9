package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// Subjects of the service (docs/design.md §11). The boundary is the last token of
// the append and read subjects.
const (
	SubjectPrefix         = "orisun.api"
	SubjectAppend         = SubjectPrefix + ".append"
	SubjectRead           = SubjectPrefix + ".read"
	SubjectLatest         = SubjectPrefix + ".latest"
	SubjectBoundaries     = SubjectPrefix + ".boundaries"
	SubjectCreateBoundary = SubjectPrefix + ".boundaries.create"
	SubjectStatus         = SubjectPrefix + ".status"
)

// ServiceName is the micro service name; ServiceVersion is the version of
// this protocol (not of the binary): it changes when the JSON shapes do.
const (
	ServiceName    = "orisun"
	ServiceVersion = "1.0.0"
)

// The micro error headers: the numeric code and the message.
const (
	ErrorCodeHeader = "Nats-Service-Error-Code"
	ErrorHeader     = "Nats-Service-Error"
)

// Read limits.
const (
	// MaxReadLimit is the largest page a read may ask for.
	MaxReadLimit = 10000
	// DefaultReadLimit is the page size of a read that names none.
	DefaultReadLimit = 1000
)

// AppendSubject returns the append subject of a boundary.
func AppendSubject(boundary string) string { return SubjectAppend + "." + boundary }

// ReadSubject returns the read subject of a boundary.
func ReadSubject(boundary string) string { return SubjectRead + "." + boundary }

// LatestSubject returns the read-latest subject of a boundary.
func LatestSubject(boundary string) string { return SubjectLatest + "." + boundary }

// AppendRequest is the body of an append.
type AppendRequest struct {
	Events    []event.Input    `json:"events"`
	Condition *event.Condition `json:"condition,omitempty"`
}

// AppendReply is event.AppendResult: {"epoch", "first", "last"}.
type AppendReply = event.AppendResult

// ReadRequest is the body of a read. Limit nil means DefaultReadLimit.
//
// Backwards reads newest first (the DCB specification's "backwards" read
// option): the events with a position below Before (0: from the head), the
// highest first. After must then be 0; Before is refused without
// Backwards. The next page of a backward read is before the last position
// it returned.
type ReadRequest struct {
	After     uint64       `json:"after"`
	Limit     *int         `json:"limit,omitempty"`
	Query     *event.Query `json:"query,omitempty"`
	Backwards bool         `json:"backwards,omitempty"`
	Before    uint64       `json:"before,omitempty"`
}

// ReadReply is the answer to a read. Events may be fewer than the limit
// when more would not fit one NATS message: the reader has reached the head
// only when Events is empty or its last position is Head. A backward read's
// events are in descending order, and it has read everything below Before
// only when Events is empty (without a query: or its last position is 1).
type ReadReply struct {
	Epoch  string        `json:"epoch"`
	Head   uint64        `json:"head"`
	Events []event.Event `json:"events"`
}

// LatestRequest is the body of a read-latest: the query (nil or no items:
// any event).
type LatestRequest struct {
	Query *event.Query `json:"query,omitempty"`
}

// LatestReply is event.Latest: {"epoch", "head", "event"}, the event null
// when none matches. Append a decision under
// {"query": the same query, "after": head}.
type LatestReply = event.Latest

// BoundariesReply lists the boundaries.
type BoundariesReply struct {
	Boundaries []event.Boundary `json:"boundaries"`
}

// CreateBoundaryRequest names the boundary to create; the reply is the
// boundary (event.Boundary).
type CreateBoundaryRequest struct {
	Name string `json:"name"`
}

// Error codes of the body and their numeric form in the
// Nats-Service-Error-Code header (HTTP-like, so that generic micro tooling
// shows something familiar).
const (
	CodeInvalid     = "invalid"
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeTooLarge    = "too_large"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	// CodeCorrupt: a stored row that the request reached does not fit the
	// log (event.ErrCorrupt); the body's position and column name it.
	CodeCorrupt = "corrupt"
)

var numeric = map[string]int{
	CodeInvalid:     400,
	CodeNotFound:    404,
	CodeConflict:    409,
	CodeTooLarge:    413,
	CodeUnavailable: 503,
	CodeInternal:    500,
	CodeCorrupt:     500,
}

// sentinels maps codes back to the sentinel errors of package event.
var sentinels = map[string]error{
	CodeInvalid:     event.ErrInvalid,
	CodeNotFound:    event.ErrNotFound,
	CodeConflict:    event.ErrConflict,
	CodeTooLarge:    event.ErrTooLarge,
	CodeUnavailable: event.ErrUnavailable,
	CodeCorrupt:     event.ErrCorrupt,
}

// NumericCode returns the header code of a body code (500 when unknown).
func NumericCode(code string) int {
	if n, ok := numeric[code]; ok {
		return n
	}
	return 500
}

// ErrorBody is the body of an error reply.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the code and the message of an error reply. Position is
// set on the conflict of a failed append condition: the first stored
// position after the condition's that matches its query; and on a corrupt
// error: the position of the bad row, Column its column ("data",
// "metadata", "tags" or "position").
type ErrorDetail struct {
	Code     string  `json:"code"`
	Message  string  `json:"message"`
	Position *uint64 `json:"position,omitempty"`
	Column   string  `json:"column,omitempty"`
}

// Error is an error reply as a Go error. errors.Is matches it against the
// sentinel of its code (event.ErrInvalid, event.ErrNotFound, …), so code on
// either side of the API handles errors the same way.
type Error struct {
	Code    string
	Message string
	// Conflict is set when the reply is the conflict of a failed append
	// condition and carries its position: errors.As(err, &ce) with ce an
	// *event.ConflictError finds it. Its Boundary and After are those of
	// the request when the client fills them in (client.Append does).
	Conflict *event.ConflictError
	// Corrupt is set when the reply is a corrupt error (a stored row that
	// does not fit the log): errors.As(err, &ce) with ce an
	// *event.CorruptError finds the row's position and column; its Reason
	// is the message, its Boundary the request's when the client fills it
	// in (client does).
	Corrupt *event.CorruptError
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the condition's conflict or the bad row, if the reply
// carried one.
func (e *Error) Unwrap() error {
	switch {
	case e.Conflict != nil:
		return e.Conflict
	case e.Corrupt != nil:
		return e.Corrupt
	}
	return nil
}

// Is makes errors.Is(err, event.ErrX) true for the sentinel of the code.
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Code]
	return ok && s == target
}

// CodeOf returns the code of an error: the first sentinel of package event
// it wraps, else internal. A context that ended is unavailable: the request
// may succeed when sent again.
func CodeOf(err error) string {
	var apiErr *Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, event.ErrCorrupt):
		return CodeCorrupt
	case errors.Is(err, event.ErrInvalid), errors.Is(err, event.ErrEpochChanged):
		return CodeInvalid
	case errors.Is(err, event.ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, event.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, event.ErrConflict):
		return CodeConflict
	case errors.Is(err, event.ErrUnavailable), errors.Is(err, event.ErrClosed),
		isContextErr(err):
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// DecodeError turns an error reply into an *Error; ok is false when the
// message is not an error reply (no Nats-Service-Error-Code header).
func DecodeError(headerCode, headerMessage string, body []byte) (err *Error, ok bool) {
	if headerCode == "" {
		return nil, false
	}
	var eb ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e := &Error{Code: eb.Error.Code, Message: eb.Error.Message}
		if eb.Error.Code == CodeConflict && eb.Error.Position != nil {
			e.Conflict = &event.ConflictError{Position: *eb.Error.Position}
		}
		if eb.Error.Code == CodeCorrupt && eb.Error.Position != nil {
			e.Corrupt = &event.CorruptError{Position: *eb.Error.Position, Column: eb.Error.Column, Reason: eb.Error.Message}
		}
		return e, true
	}
	// A micro error from elsewhere (no orisun body): keep what the
	// headers say. 500 is internal (corrupt, which shares it, always has
	// a body).
	code := CodeInternal
	for c, n := range numeric {
		if fmt.Sprint(n) == headerCode && c != CodeCorrupt {
			code = c
		}
	}
	return &Error{Code: code, Message: headerMessage}, true
}
