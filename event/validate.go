package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun/internal/rawjson"
)

// Limits of one event and one append. Every limit is checked before anything
// is written.
const (
	// MaxBoundaryNameLen is the longest boundary name.
	MaxBoundaryNameLen = 63
	// MaxTypeLen is the longest event type, in bytes.
	MaxTypeLen = 255
	// MaxTags is the most tags one event may carry.
	MaxTags = 64
	// MaxTagLen is the longest tag, in bytes.
	MaxTagLen = 255
	// MaxQueryItems is the most items of one query; MaxQueryTypes and
	// MaxQueryTags the most types and tags of one item. They bound the size
	// of the statement a query becomes.
	MaxQueryItems = 64
	MaxQueryTypes = 64
	MaxQueryTags  = MaxTags
)

// Limits are the configurable limits of an append.
type Limits struct {
	// MaxAppendEvents is the most events in one append.
	MaxAppendEvents int
	// MaxAppendBytes is the most bytes of data, metadata, types, tags and ids
	// in one append.
	MaxAppendBytes int
	// MaxEventBytes is the largest encoded event (stream message: headers
	// and body); it must fit the NATS max payload. EncodedSize measures it.
	MaxEventBytes int
	// EncodedSize returns the size of the stream message the event becomes.
	// Nil means "data, metadata, type, tags and id added up".
	EncodedSize func(boundary string, in *Input) int
}

// ValidateBoundaryName checks a boundary name: ^[a-z][a-z0-9_]{0,62}$. Such a
// name is safe as a NATS subject token, a stream name and a SQL value.
func ValidateBoundaryName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: boundary name is empty; it must match ^[a-z][a-z0-9_]{0,62}$", ErrInvalid)
	}
	if len(name) > MaxBoundaryNameLen {
		return fmt.Errorf("%w: boundary name is %d bytes long, the limit is %d", ErrInvalid, len(name), MaxBoundaryNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')
		if !ok {
			return fmt.Errorf("%w: boundary name %q: byte %d (%s) is not allowed; a name must match ^[a-z][a-z0-9_]{0,62}$",
				ErrInvalid, name, i, describeByte(c))
		}
	}
	return nil
}

// describeByte shows a refused byte. %q of a byte above 0x7f would show
// the Latin-1 character of that value ('é' would be reported as 'Ã'), which
// is not what the user typed: such a byte is named by its value instead.
func describeByte(c byte) string {
	if c >= utf8.RuneSelf {
		return fmt.Sprintf("0x%02x, not ASCII", c)
	}
	return fmt.Sprintf("%q", rune(c))
}

// ValidateType checks an event type: one or more dot-separated tokens of
// letters, digits, '_', '-' and ':', at most MaxTypeLen bytes. The type is the
// tail of the event's NATS subject, so a dotted type is a subject hierarchy
// and wildcards ('*', '>') and other specials can never appear in it.
func ValidateType(t string) error {
	if t == "" {
		return fmt.Errorf("%w: type is empty", ErrInvalid)
	}
	if len(t) > MaxTypeLen {
		return fmt.Errorf("%w: type is %d bytes long, the limit is %d", ErrInvalid, len(t), MaxTypeLen)
	}
	tokenLen := 0
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '.':
			if tokenLen == 0 {
				return fmt.Errorf("%w: type %q has an empty token at byte %d; tokens are separated by single dots", ErrInvalid, t, i)
			}
			tokenLen = 0
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == ':':
			tokenLen++
		default:
			return fmt.Errorf("%w: type %q: byte %d (%s) is not allowed; use letters, digits, '_', '-', ':' and '.' between tokens",
				ErrInvalid, t, i, describeByte(c))
		}
	}
	if tokenLen == 0 {
		return fmt.Errorf("%w: type %q ends with a dot", ErrInvalid, t)
	}
	return nil
}

// ValidateTag checks one tag: non-empty, valid UTF-8 without NUL, at most
// MaxTagLen bytes.
func ValidateTag(tag string) error {
	switch {
	case tag == "":
		return fmt.Errorf("%w: tag is empty", ErrInvalid)
	case len(tag) > MaxTagLen:
		return fmt.Errorf("%w: tag is %d bytes long, the limit is %d", ErrInvalid, len(tag), MaxTagLen)
	case !utf8.ValidString(tag):
		return fmt.Errorf("%w: tag %q is not valid UTF-8", ErrInvalid, tag)
	case strings.IndexByte(tag, 0) >= 0:
		return fmt.Errorf("%w: tag %q contains a NUL byte", ErrInvalid, tag)
	}
	return nil
}

// ValidateQuery checks a query's types and tags, and its size. A nil query
// and a query without items are valid: they match every event (see Query).
func ValidateQuery(q *Query) error {
	if q == nil {
		return nil
	}
	if len(q.Items) > MaxQueryItems {
		return fmt.Errorf("%w: query has %d items, the limit is %d", ErrTooLarge, len(q.Items), MaxQueryItems)
	}
	for i, it := range q.Items {
		if len(it.Types) > MaxQueryTypes {
			return fmt.Errorf("%w: query item %d has %d types, the limit is %d", ErrTooLarge, i, len(it.Types), MaxQueryTypes)
		}
		if len(it.Tags) > MaxQueryTags {
			return fmt.Errorf("%w: query item %d has %d tags, the limit is %d", ErrTooLarge, i, len(it.Tags), MaxQueryTags)
		}
		for _, t := range it.Types {
			if err := ValidateType(t); err != nil {
				return fmt.Errorf("query item %d: %w", i, err)
			}
		}
		for _, tag := range it.Tags {
			if err := ValidateTag(tag); err != nil {
				return fmt.Errorf("query item %d: %w", i, err)
			}
		}
	}
	return nil
}

// NewID returns a new time-ordered UUIDv7 in its canonical lower-case form.
// Time-ordered ids keep the id index append-mostly (docs/design.md §3).
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// Prepare validates an append and returns its events normalised: ids given
// or generated (canonical lower case), JSON compacted, "null" metadata
// dropped, nil tags made empty. Input is not modified; data and metadata
// that are compact already are the input's bytes, not copies (the caller
// keeps them unchanged until the append returns). The error names the
// event (by index) and the field, and wraps ErrInvalid or ErrTooLarge.
func Prepare(boundary string, in []Input, lim Limits) ([]Input, error) {
	if err := ValidateBoundaryName(boundary); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, fmt.Errorf("%w: events: the append holds no events; send at least one", ErrInvalid)
	}
	if lim.MaxAppendEvents > 0 && len(in) > lim.MaxAppendEvents {
		return nil, fmt.Errorf("%w: events: the append holds %d events, the limit is %d", ErrTooLarge, len(in), lim.MaxAppendEvents)
	}
	out := make([]Input, len(in))
	// The ids seen: a map for a large append; a few are compared with
	// each other (a map per append was a tenth of what Prepare allocated
	// for a single event).
	var seen map[string]int
	if len(in) > fewEvents {
		seen = make(map[string]int, len(in))
	}
	total := 0
	for i := range in {
		e, err := prepareOne(&in[i])
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		if j, dup := firstID(out[:i], seen, e.ID); dup {
			return nil, fmt.Errorf("%w: events[%d].id: %s is also the id of events[%d]; ids must be unique", ErrInvalid, i, e.ID, j)
		}
		if seen != nil {
			seen[e.ID] = i
		}
		size := rawSize(&e)
		if lim.EncodedSize != nil {
			size = lim.EncodedSize(boundary, &e)
		}
		if lim.MaxEventBytes > 0 && size > lim.MaxEventBytes {
			return nil, fmt.Errorf("%w: events[%d]: the encoded event is %d bytes, the limit (NATS max payload) is %d",
				ErrTooLarge, i, size, lim.MaxEventBytes)
		}
		total += rawSize(&e)
		if lim.MaxAppendBytes > 0 && total > lim.MaxAppendBytes {
			return nil, fmt.Errorf("%w: events: the append is over %d bytes (at events[%d]), the limit is %d",
				ErrTooLarge, total, i, lim.MaxAppendBytes)
		}
		out[i] = e
	}
	return out, nil
}

// fewEvents is the most events of an append whose ids Prepare compares
// with each other rather than look up in a map.
const fewEvents = 8

// firstID returns the index of id among the events before (in seen when
// it is not nil).
func firstID(before []Input, seen map[string]int, id string) (int, bool) {
	if seen != nil {
		j, ok := seen[id]
		return j, ok
	}
	for j := range before {
		if before[j].ID == id {
			return j, true
		}
	}
	return 0, false
}

func rawSize(e *Input) int {
	n := len(e.ID) + len(e.Type) + len(e.Data) + len(e.Metadata)
	for _, t := range e.Tags {
		n += len(t) + 3
	}
	return n
}

func prepareOne(in *Input) (Input, error) {
	e := Input{Type: in.Type}
	if in.ID == "" {
		e.ID = NewID()
	} else {
		if len(in.ID) != 36 {
			return e, fmt.Errorf("%w: id %q is not a UUID in its 36-character form", ErrInvalid, truncate(in.ID))
		}
		u, err := uuid.Parse(in.ID)
		if err != nil {
			return e, fmt.Errorf("%w: id %q is not a UUID: %v", ErrInvalid, in.ID, err)
		}
		e.ID = u.String()
	}
	if err := ValidateType(in.Type); err != nil {
		return e, fmt.Errorf("type: %w", err)
	}
	data, err := compactJSON("data", in.Data, true)
	if err != nil {
		return e, err
	}
	e.Data = data
	md, err := compactJSON("metadata", in.Metadata, false)
	if err != nil {
		return e, err
	}
	e.Metadata = md
	if len(in.Tags) > MaxTags {
		return e, fmt.Errorf("%w: tags: the event has %d tags, the limit is %d", ErrTooLarge, len(in.Tags), MaxTags)
	}
	e.Tags = make([]string, len(in.Tags))
	for i, t := range in.Tags {
		if err := ValidateTag(t); err != nil {
			return e, fmt.Errorf("tags[%d]: %w", i, err)
		}
		e.Tags[i] = t
	}
	return e, nil
}

func compactJSON(field string, raw json.RawMessage, required bool) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		if required {
			return nil, fmt.Errorf("%w: %s is missing; it must be a JSON value", ErrInvalid, field)
		}
		return nil, nil
	}
	// The data of every append goes through here. Bytes that are valid
	// and already compact (what clients send) are kept as they are: one
	// pass of rawjson, no copy (issue 22). Anything else goes through
	// json.Compact, which compacts, or names what is wrong.
	if valid, compact := rawjson.Check(trimmed); valid && compact {
		return trimmed[:len(trimmed):len(trimmed)], nil
	}
	var buf bytes.Buffer
	buf.Grow(len(trimmed))
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, fmt.Errorf("%w: %s is not valid JSON: %v", ErrInvalid, field, err)
	}
	if !utf8.Valid(trimmed) {
		// encoding/json accepts invalid UTF-8 in strings; RFC 8259 and
		// consumers in other languages do not.
		return nil, fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	return buf.Bytes(), nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Equal reports whether a stored event has the content of an input: the
// test of an idempotent retry (docs/design.md §3). Both must be normalised.
// Data and metadata are the same when their bytes are, or when they differ
// only in the HTML escaping of encoding/json (see sameJSON).
func (in *Input) Equal(e *Event) bool {
	if in.ID != e.ID || in.Type != e.Type || !sameJSON(in.Data, e.Data) || !sameJSON(in.Metadata, e.Metadata) {
		return false
	}
	if len(in.Tags) != len(e.Tags) {
		return false
	}
	for i := range in.Tags {
		if in.Tags[i] != e.Tags[i] {
			return false
		}
	}
	return true
}

// sameJSON reports whether two compact JSON values are the same bytes, or
// the same once `<`, `>`, `&`, U+2028 and U+2029 in their strings are
// written as encoding/json's HTML escaping writes them (\u003c, …): the
// same value. The Go client escaped them before it sent data as given
// (issue 22), so an event it stored then and a retry of it sent now, or
// by any other client, differ in those bytes only.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y bytes.Buffer
	json.HTMLEscape(&x, a)
	json.HTMLEscape(&y, b)
	return bytes.Equal(x.Bytes(), y.Bytes())
}
