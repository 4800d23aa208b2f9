// Package rawjson validates JSON values in place: one pass over the bytes,
// no copy, no allocation. It is orisun's machinery, whose API may change
// without notice.
//
// It is how an event's data and metadata travel as
// the bytes the client sent (issue 22): the API service finds each event's
// fields with it, event.Prepare checks data and metadata with it and keeps
// them as they are when they are already compact, and the Go client writes
// them into its request without encoding them again.
//
// It accepts exactly the JSON of RFC 8259 (what encoding/json's scanner
// accepts) whose strings are valid UTF-8 (what encoding/json does not check
// and orisun requires), nested at most MaxDepth deep. Whatever it refuses,
// its callers hand to encoding/json, whose error they report: a value this
// package refuses is not necessarily invalid (it may be nested deeper), but
// a value it accepts always is valid.
package rawjson

import (
	"strconv"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting Value accepts (encoding/json's is 10000;
// deeper values go to it).
const MaxDepth = 1024

// plain marks the bytes that a string holds as they are: printable ASCII
// but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Value validates the JSON value that starts at data[i] (no whitespace
// before it) and returns the index after its last byte. spaced reports
// whitespace between its tokens (the value is not compact); ok is false
// when no valid value starts at i (or it is nested deeper than MaxDepth,
// or a string in it is not valid UTF-8). What follows the value is not
// looked at.
func Value(data []byte, i int) (end int, spaced, ok bool) {
	var objects [MaxDepth / 64]uint64 // bit d: the container at depth d is an object
	depth, n := 0, len(data)
value:
	if i >= n {
		return i, spaced, false
	}
	switch c := data[i]; c {
	case '{', '[':
		if depth == MaxDepth {
			return i, spaced, false
		}
		if c == '{' {
			objects[depth>>6] |= 1 << (depth & 63)
		} else {
			objects[depth>>6] &^= 1 << (depth & 63)
		}
		depth++
		i++
		if j := Space(data, i); j != i {
			i, spaced = j, true
		}
		if i < n && data[i] == c+2 { // '}' and ']' are two past '{' and '['
			i++
			depth--
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case '"':
		if i, ok = String(data, i); !ok {
			return i, spaced, false
		}
	case 't':
		if i, ok = Literal(data, i, "true"); !ok {
			return i, spaced, false
		}
	case 'f':
		if i, ok = Literal(data, i, "false"); !ok {
			return i, spaced, false
		}
	case 'n':
		if i, ok = Literal(data, i, "null"); !ok {
			return i, spaced, false
		}
	default:
		if i, ok = Number(data, i); !ok {
			return i, spaced, false
		}
	}
after:
	if depth == 0 {
		return i, spaced, true
	}
	if j := Space(data, i); j != i {
		i, spaced = j, true
	}
	if i >= n {
		return i, spaced, false
	}
	{
		object := objects[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
		switch data[i] {
		case ',':
			i++
			if j := Space(data, i); j != i {
				i, spaced = j, true
			}
			if object {
				goto key
			}
			goto value
		case '}':
			if !object {
				return i, spaced, false
			}
		case ']':
			if object {
				return i, spaced, false
			}
		default:
			return i, spaced, false
		}
		i++
		depth--
		goto after
	}
key:
	if i >= n || data[i] != '"' {
		return i, spaced, false
	}
	if i, ok = String(data, i); !ok {
		return i, spaced, false
	}
	if j := Space(data, i); j != i {
		i, spaced = j, true
	}
	if i >= n || data[i] != ':' {
		return i, spaced, false
	}
	i++
	if j := Space(data, i); j != i {
		i, spaced = j, true
	}
	goto value
}

// Space returns the index of the first byte at or after i that is not
// JSON whitespace.
func Space(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// String validates the string that opens at data[i] (its quote) and
// returns the index after its closing quote.
func String(data []byte, i int) (end int, ok bool) {
	n := len(data)
	for i++; i < n; {
		c := data[i]
		if plain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= n {
				return n, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > n || !hex(data[i+2]) || !hex(data[i+3]) || !hex(data[i+4]) || !hex(data[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return i, false
			}
			i += size
		}
	}
	return n, false
}

// Plain returns the index after the string that opens at data[i] when it
// holds printable ASCII only, with no escape: its bytes between the quotes
// are then the string itself. ok is false for any other string.
func Plain(data []byte, i int) (end int, ok bool) {
	for i++; i < len(data); i++ {
		if c := data[i]; !plain[c] {
			return i + 1, c == '"'
		}
	}
	return i, false
}

// PlainText is Plain that also takes valid UTF-8 beyond ASCII (but no
// control character, escape or invalid byte): its bytes between the quotes
// are then still the string itself, as encoding/json would decode it.
func PlainText(data []byte, i int) (end int, ok bool) {
	for i++; i < len(data); {
		c := data[i]
		if plain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return i + 1, c == '"'
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i + 1, false
		}
		i += size
	}
	return i, false
}

func hex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Literal returns the index after lit when data holds it at i; ok false
// (and i) when it does not.
func Literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// Slice validates the JSON value that starts at data[i] (Value) and
// returns it as a sub-slice of data, capped so that appending to it never
// writes into data, and the index after it: what json.RawMessage would
// hold, without the copy.
func Slice(data []byte, i int) (v []byte, end int, ok bool) {
	end, _, ok = Value(data, i)
	if !ok {
		return nil, i, false
	}
	return data[i:end:end], end, true
}

// Uint reads the unsigned decimal integer at data[i] (digits, no leading
// zero, within uint64: what encoding/json decodes into a uint64) and
// returns it and the index after it.
func Uint(data []byte, i int) (n uint64, end int, ok bool) {
	j := i
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == i || data[i] == '0' && j-i > 1 {
		return 0, i, false
	}
	n, err := strconv.ParseUint(string(data[i:j]), 10, 64)
	if err != nil {
		return 0, i, false
	}
	return n, j, true
}

// Number validates the number that starts at data[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns the index
// after it.
func Number(data []byte, i int) (end int, ok bool) {
	n := len(data)
	if i < n && data[i] == '-' {
		i++
	}
	switch {
	case i >= n:
		return i, false
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		i = digits(data, i+1)
	default:
		return i, false
	}
	if i < n && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < n && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < n && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// Check reports whether data is one JSON value with valid UTF-8 strings
// (whitespace around it allowed, as json.Valid allows it), and whether it
// is compact: no whitespace at all outside its strings, what json.Compact
// returns unchanged.
func Check(data []byte) (valid, compact bool) {
	start := Space(data, 0)
	end, spaced, ok := Value(data, start)
	if !ok || Space(data, end) != len(data) {
		return false, false
	}
	return true, !spaced && start == 0 && end == len(data)
}
