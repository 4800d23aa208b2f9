package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Duplicate keys. encoding/json keeps the last of two keys that name the same
// field, so {"events":[…],"condition":{…},"condition":null} would be an
// unconditional append. Keys name the same field when they are equal once
// unescaped, regardless of case ("\u0063ondition" and "Condition" are
// "condition" to the decoder), so that is what "the same key" means here.
//
// The check runs after the request decoded, so the body is known to be one
// valid JSON value whose objects hold only known fields: it walks the
// envelope (the request, its events, the condition, a query and its items)
// and skips the data and metadata of each event without looking inside, in
// one pass with no allocation unless a key is escaped. data and metadata are
// the application's JSON and are stored as given, duplicate keys included.
// The appends' hot path pays for it: BenchmarkDecodeAppend and
// BenchmarkDuplicateKeyScan measure decoding with it and the check alone.

// maxKeyDepth bounds the nesting the check walks into, as encoding/json
// bounds what it decodes; the envelope is six levels deep at most.
const maxKeyDepth = 10000

// keyRule says which objects are the envelope's. rawEvents: the objects in
// an array of the request's top level are events, whose data and metadata
// are not. It fits the append request: the only array of its top level is
// events (a query's items lie deeper, under condition.query).
type keyRule int

const (
	checkAll  keyRule = iota // every object of the body is envelope
	rawEvents                // events[i].data and events[i].metadata are skipped
)

// errMalformed: the body is not JSON. decode runs the check on bodies that
// decoded, so the service never sees it; the fuzz target feeds it anything.
var errMalformed = errors.New("malformed JSON")

// dupKeyError is a key given twice in one object. path leads to the object,
// innermost step last; it is filled as the check unwinds.
type dupKeyError struct {
	path       []string
	key, first string // as given (unescaped): the second and the first spelling
	request    string // "the append request", …
}

func (e *dupKeyError) Error() string {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		p := e.path[i]
		if b.Len() > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "duplicate key %q in %s", e.key, e.request)
	if e.first != e.key {
		fmt.Fprintf(&b, " (the same field as %q before it: keys match regardless of case)", e.first)
	}
	b.WriteString("; give each key once")
	return b.String()
}

// keyScanner walks one JSON value.
type keyScanner struct {
	data []byte
	i    int
	rule keyRule
}

// duplicateKey returns a *dupKeyError for the first key given twice in an
// object of data's envelope (see keyRule), errMalformed when data is not
// JSON, and nil otherwise. It never panics, whatever data holds.
func duplicateKey(data []byte, rule keyRule, request string) error {
	s := keyScanner{data: data, rule: rule}
	err := s.value(0)
	if dk, ok := err.(*dupKeyError); ok {
		dk.request = request
	}
	return err
}

// stop marks the bytes that end a scalar; structural the bytes that matter
// inside a skipped container.
var stop, structural = byteSet(`"{}[],: ` + "\t\r\n"), byteSet(`"{}[]`)

func byteSet(s string) (t [256]bool) {
	for _, c := range []byte(s) {
		t[c] = true
	}
	return t
}

func (s *keyScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// value walks the value at s.i; depth counts the containers around it.
func (s *keyScanner) value(depth int) error {
	s.space()
	if s.i >= len(s.data) {
		return errMalformed
	}
	switch s.data[s.i] {
	case '{':
		return s.object(depth + 1)
	case '[':
		return s.array(depth+1, false)
	case '"':
		return s.str()
	default:
		start := s.i
		for s.i < len(s.data) && !stop[s.data[s.i]] {
			s.i++
		}
		if s.i == start {
			return errMalformed
		}
		return nil
	}
}

// str moves past the string at s.i (its opening quote).
func (s *keyScanner) str() error {
	i, ok := endOfString(s.data, s.i)
	s.i = i
	if !ok {
		return errMalformed
	}
	return nil
}

// endOfString returns the index after the string that opens at data[i],
// and false when the string does not end. A byte loop: the strings of
// JSON are mostly short, where it beats bytes.IndexByte and eight-bytes-at-
// a-time searches (measured on BenchmarkDuplicateKeyScan's events).
func endOfString(data []byte, i int) (int, bool) {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++ // the escaped byte (a \u sequence's hex digits are plain bytes)
		}
	}
	return len(data), false
}

// array walks the array at s.i; events says its objects are events.
func (s *keyScanner) array(depth int, events bool) error {
	if depth > maxKeyDepth {
		return errMalformed
	}
	s.i++ // [
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return nil
	}
	for idx := 0; ; idx++ {
		var err error
		s.space()
		if events && s.i < len(s.data) && s.data[s.i] == '{' {
			err = s.fields(depth+1, true)
		} else {
			err = s.value(depth)
		}
		if err != nil {
			return inside(err, "["+strconv.Itoa(idx)+"]")
		}
		if done, err := s.separator(']'); done || err != nil {
			return err
		}
	}
}

func (s *keyScanner) object(depth int) error { return s.fields(depth, false) }

// fields walks the object at s.i, comparing each key with the ones before
// it (an object of the envelope has a handful of keys: comparing each pair
// costs less than a map would). event says it is an event of the append
// request: its data and metadata are skipped.
func (s *keyScanner) fields(depth int, event bool) error {
	if depth > maxKeyDepth {
		return errMalformed
	}
	var buf [8][]byte
	keys := buf[:0]
	s.i++ // {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return errMalformed
		}
		start := s.i
		if err := s.str(); err != nil {
			return err
		}
		key := s.data[start+1 : s.i-1]
		for _, k := range keys {
			if sameKey(k, key) {
				return &dupKeyError{key: unescape(key), first: unescape(k)}
			}
		}
		keys = append(keys, key)
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return errMalformed
		}
		s.i++
		s.space()
		var err error
		switch {
		case event && (sameKey(key, []byte("data")) || sameKey(key, []byte("metadata"))):
			err = s.skip()
		case depth == 1 && s.rule == rawEvents && s.i < len(s.data) && s.data[s.i] == '[':
			err = s.array(depth+1, true)
		default:
			err = s.value(depth)
		}
		if err != nil {
			return inside(err, unescape(key))
		}
		if done, err := s.separator('}'); done || err != nil {
			return err
		}
	}
}

// skip moves past the value at s.i without looking at its keys: the
// application's JSON, which is most of an append's bytes. It finds the end
// of the value and nothing else: strings jumped over, brackets counted.
func (s *keyScanner) skip() error {
	data, i := s.data, s.i
	if i >= len(data) {
		return errMalformed
	}
	switch data[i] {
	case '"':
		return s.str()
	case '{', '[':
	default:
		return s.value(0) // a number, true, false or null
	}
	depth := 0
	for i < len(data) {
		c := data[i]
		if !structural[c] {
			i++
			continue
		}
		switch c {
		case '"':
			var ok bool
			if i, ok = endOfString(data, i); !ok {
				s.i = i
				return errMalformed
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i = i + 1
				return nil
			}
		}
		i++
	}
	s.i = i
	return errMalformed
}

// inside adds a step to the path of a duplicate key found below it.
func inside(err error, step string) error {
	if dk, ok := err.(*dupKeyError); ok {
		dk.path = append(dk.path, step)
	}
	return err
}

// separator reads what follows a member of an array or an object: a
// comma (more follow) or the closing byte (done).
func (s *keyScanner) separator(closing byte) (done bool, err error) {
	s.space()
	if s.i >= len(s.data) {
		return false, errMalformed
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	return false, errMalformed
}

// sameKey reports whether two raw keys (between their quotes) name the same
// field to encoding/json: equal once unescaped, regardless of case (its
// fold is bytes.EqualFold's).
func sameKey(a, b []byte) bool {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return bytes.EqualFold(a, b)
	}
	return strings.EqualFold(unescape(a), unescape(b))
}

// unescape returns a raw key as encoding/json reads it (invalid UTF-8 and
// lone surrogates become U+FFFD).
func unescape(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw)
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	if json.Unmarshal(q, &s) != nil {
		return string(raw)
	}
	return s
}
