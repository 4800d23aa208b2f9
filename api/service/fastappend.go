package service

import (
	"bytes"
	"encoding/json"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/rawjson"
)

// The append request in one pass (issue 22). decode reads a body with
// encoding/json and then looks for duplicate keys: the body is walked three
// times and data and metadata are copied, on every append, the largest
// share of the node's CPU in the profile of docs/performance.md ("The
// users' path"). decodeAppend first tries fastAppend, which walks the body
// once, validates data and metadata as it passes them (rawjson) and keeps
// them as sub-slices of the body. It takes only the plain form of a
// request: keys that are printable ASCII without escapes, each field at
// most once, strings without escapes (but data and metadata, which may hold
// anything), a condition of known fields. Any other body, and every body
// that is wrong, goes to decode, whose result or error (naming the field)
// is the same as before: fastAppend never decides that a request is wrong.
// TestAppendDecodersAgree holds the two to the same results.

// decodeAppend decodes an append request: what decode does with an
// api.AppendRequest and rawEvents.
func decodeAppend(data []byte) (api.AppendRequest, error) {
	if r, ok := fastAppend(data); ok {
		return r, nil
	}
	var r api.AppendRequest
	err := decode(data, &r, "the append request", `events (id, type, data, metadata, tags) and condition (query, after)`, rawEvents)
	return r, err
}

// fastAppend decodes the plain form of an append request (see above); ok
// false: the body is another form, or wrong.
func fastAppend(data []byte) (r api.AppendRequest, ok bool) {
	p := plainParser{data: data}
	if !p.open('{') {
		return r, false
	}
	var seen [2]bool
	for {
		key, ok := p.key()
		if !ok {
			return r, false
		}
		switch {
		case fieldIs(key, "events") && !seen[0]:
			seen[0] = true
			if r.Events, ok = p.events(); !ok {
				return r, false
			}
		case fieldIs(key, "condition") && !seen[1]:
			seen[1] = true
			if r.Condition, ok = p.condition(); !ok {
				return r, false
			}
		default:
			return r, false
		}
		if done, ok := p.next('}'); !ok {
			return r, false
		} else if done {
			break
		}
	}
	// An empty list of events is refused by Prepare: decode says so.
	return r, len(r.Events) > 0 && rawjson.Space(data, p.i) == len(data)
}

// plainParser reads the plain form of a request.
type plainParser struct {
	data []byte
	i    int
}

// open reads c (an opening bracket, after whitespace) and the whitespace
// after it; false when the container is empty: decode handles that.
func (p *plainParser) open(c byte) bool {
	p.i = rawjson.Space(p.data, p.i)
	if p.i >= len(p.data) || p.data[p.i] != c {
		return false
	}
	p.i = rawjson.Space(p.data, p.i+1)
	return p.i < len(p.data) && p.data[p.i] != c+2
}

// next reads what follows a member: a comma (done false) or closing (done
// true), and the whitespace after either.
func (p *plainParser) next(closing byte) (done, ok bool) {
	p.i = rawjson.Space(p.data, p.i)
	if p.i >= len(p.data) {
		return false, false
	}
	switch p.data[p.i] {
	case ',':
		p.i = rawjson.Space(p.data, p.i+1)
		return false, true
	case closing:
		p.i++
		return true, true
	}
	return false, false
}

// str reads a plain string (printable ASCII, no escape) and returns its
// bytes between the quotes. Keys are read so: encoding/json matches a key
// beyond ASCII to a field by Unicode case folding ("tagſ" is "tags"), which
// the fast path leaves to it.
func (p *plainParser) str() ([]byte, bool) { return p.quoted(rawjson.Plain) }

// text reads a string value that is plain or valid UTF-8 without escapes
// (a tag "kunde:é1"), and returns its bytes between the quotes.
func (p *plainParser) text() ([]byte, bool) { return p.quoted(rawjson.PlainText) }

func (p *plainParser) quoted(scan func([]byte, int) (int, bool)) ([]byte, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return nil, false
	}
	end, ok := scan(p.data, p.i)
	if !ok {
		return nil, false
	}
	s := p.data[p.i+1 : end-1]
	p.i = end
	return s, true
}

// key reads a plain key, the colon and the whitespace around it.
func (p *plainParser) key() ([]byte, bool) {
	k, ok := p.str()
	if !ok {
		return nil, false
	}
	p.i = rawjson.Space(p.data, p.i)
	if p.i >= len(p.data) || p.data[p.i] != ':' {
		return nil, false
	}
	p.i = rawjson.Space(p.data, p.i+1)
	return k, true
}

// fieldIs reports whether a plain key names the field (lower case):
// encoding/json matches keys regardless of case, and for a key of
// printable ASCII that is ASCII's case.
func fieldIs(key []byte, field string) bool {
	if len(key) != len(field) {
		return false
	}
	for i := range len(key) {
		if c := key[i]; c != field[i] && c+'a'-'A' != field[i] {
			return false
		}
	}
	return true
}

// events reads the array of events.
func (p *plainParser) events() ([]event.Input, bool) {
	if !p.open('[') {
		return nil, false
	}
	events := make([]event.Input, 0, 1)
	for {
		events = append(events, event.Input{})
		if !p.event(&events[len(events)-1]) {
			return nil, false
		}
		if done, ok := p.next(']'); !ok {
			return nil, false
		} else if done {
			return events, true
		}
	}
}

// event reads one event.
func (p *plainParser) event(e *event.Input) bool {
	if !p.open('{') {
		return false
	}
	var seen [5]bool
	for {
		key, ok := p.key()
		if !ok {
			return false
		}
		f := -1
		for i, name := range [...]string{"id", "type", "data", "metadata", "tags"} {
			if fieldIs(key, name) {
				f = i
				break
			}
		}
		if f < 0 || seen[f] {
			return false
		}
		seen[f] = true
		var s []byte
		switch f {
		case 0:
			s, ok = p.text()
			e.ID = string(s)
		case 1:
			s, ok = p.text()
			e.Type = string(s)
		case 2:
			e.Data, ok = p.raw()
		case 3:
			e.Metadata, ok = p.raw()
		case 4:
			e.Tags, ok = p.tags()
		}
		if !ok {
			return false
		}
		if done, ok := p.next('}'); !ok {
			return false
		} else if done {
			return true
		}
	}
}

// raw reads a JSON value and returns its bytes, which are the request's
// (capped, so that nothing appends into the request).
func (p *plainParser) raw() (json.RawMessage, bool) {
	v, end, ok := rawjson.Slice(p.data, p.i)
	p.i = end
	return v, ok
}

// tags reads the tags: null or an array of plain strings.
func (p *plainParser) tags() ([]string, bool) {
	if bytes.HasPrefix(p.data[p.i:], []byte("null")) {
		p.i += 4
		return nil, true
	}
	if p.i < len(p.data) && p.data[p.i] == '[' {
		if j := rawjson.Space(p.data, p.i+1); j < len(p.data) && p.data[j] == ']' {
			p.i = j + 1
			return []string{}, true
		}
	}
	if !p.open('[') {
		return nil, false
	}
	tags := make([]string, 0, 4)
	for {
		s, ok := p.text()
		if !ok {
			return nil, false
		}
		tags = append(tags, string(s))
		if done, ok := p.next(']'); !ok {
			return nil, false
		} else if done {
			return tags, true
		}
	}
}

// condition reads the condition: null, or an object that decode's rules
// take as it is, decoded with them (a condition is a few dozen bytes).
func (p *plainParser) condition() (*event.Condition, bool) {
	if bytes.HasPrefix(p.data[p.i:], []byte("null")) {
		p.i += 4
		return nil, true
	}
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return nil, false
	}
	raw, ok := p.raw()
	if !ok {
		return nil, false
	}
	var c event.Condition
	if decode(raw, &c, "the append request", "", checkAll) != nil {
		return nil, false
	}
	return &c, true
}
