package stream

import (
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/rawjson"
)

// The message body in one pass (issue 22). Every event a live subscription
// delivers is decoded here, in the subscriber's process: encoding/json
// walked the body twice (the validity scan, then the decode) and copied
// data and metadata, the largest share of a Go client's CPU on a live
// subscription after its own appends and the collector
// (docs/performance.md, "The live path at 5,000 events/s"). fastBody reads
// the body as appendBody writes it: the fields in that order, no
// whitespace, strings without escapes, data and metadata validated as
// they pass (rawjson) and kept as sub-slices of the body. Any other body,
// and every body that is wrong, goes to encoding/json as before, whose
// result or error is then Decode's: fastBody never decides that a body is
// wrong. TestDecodersAgree holds the two to the same results.

// fastBody decodes a body in the form appendBody writes; ok false: another
// form, or not an event.
func fastBody(data []byte) (e event.Event, ok bool) {
	p := bodyParser{data: data}
	if !p.lit(`{"id":`) {
		return e, false
	}
	if e.ID, ok = p.str(); !ok || !p.lit(`,"boundary":`) {
		return e, false
	}
	if e.Boundary, ok = p.str(); !ok || !p.lit(`,"epoch":`) {
		return e, false
	}
	if e.Epoch, ok = p.str(); !ok || !p.lit(`,"position":`) {
		return e, false
	}
	if e.Position, ok = p.uint(); !ok || !p.lit(`,"type":`) {
		return e, false
	}
	if e.Type, ok = p.str(); !ok || !p.lit(`,"time":`) {
		return e, false
	}
	// The time as time.Time's UnmarshalJSON reads it: its UnmarshalText
	// is the same strict RFC 3339 parse, without the quotes.
	start := p.i
	if _, ok = p.str(); !ok || e.Time.UnmarshalText(data[start+1:p.i-1]) != nil || !p.lit(`,"tags":[`) {
		return e, false
	}
	e.Tags = []string{}
	for first := true; ; first = false {
		if p.lit("]") {
			break
		}
		if !first && !p.lit(",") {
			return e, false
		}
		t, ok := p.str()
		if !ok {
			return e, false
		}
		e.Tags = append(e.Tags, t)
	}
	if !p.lit(`,"data":`) {
		return e, false
	}
	if e.Data, ok = p.value(); !ok || !p.lit(`,"metadata":`) {
		return e, false
	}
	if e.Metadata, ok = p.value(); !ok || !p.lit("}") {
		return e, false
	}
	return e, p.i == len(data)
}

// bodyParser reads a body in appendBody's form.
type bodyParser struct {
	data []byte
	i    int
}

// lit reads s.
func (p *bodyParser) lit(s string) bool {
	i, ok := rawjson.Literal(p.data, p.i, s)
	p.i = i
	return ok
}

// str reads a string without escapes or control characters, in valid
// UTF-8: its bytes are then what encoding/json would decode it to.
func (p *bodyParser) str() (string, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return "", false
	}
	end, ok := rawjson.PlainText(p.data, p.i)
	if !ok {
		return "", false
	}
	s := string(p.data[p.i+1 : end-1])
	p.i = end
	return s, true
}

// uint reads a position: decimal digits, no leading zero, within uint64.
func (p *bodyParser) uint() (uint64, bool) {
	n, end, ok := rawjson.Uint(p.data, p.i)
	p.i = end
	return n, ok
}

// value reads a JSON value, validated, as a sub-slice of the body (as
// json.RawMessage would hold it, without the copy).
func (p *bodyParser) value() ([]byte, bool) {
	v, end, ok := rawjson.Slice(p.data, p.i)
	p.i = end
	return v, ok
}
