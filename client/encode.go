package client

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/rawjson"
)

// encodeAppend writes the body of an append request: what json.Marshal of
// an api.AppendRequest writes, field for field (TestEncodeAppend holds it
// to that), but with data and
// metadata as the application gave them when they are compact JSON (most
// are), and nothing HTML-escaped. json.Marshal compacts a json.RawMessage
// again and turns `<`, `>`, `&`, U+2028 and U+2029 in its strings into
// \u escapes: 38% of the client's CPU in docs/performance.md ("The users'
// path"), and an event appended through this client was stored with other
// bytes than the same event sent by any other NATS client. Data or
// metadata that is not JSON is an error naming the event and the field.
func encodeAppend(events []event.Input, cond *event.Condition) ([]byte, error) {
	size := 64
	for i := range events {
		e := &events[i]
		size += 96 + len(e.ID) + len(e.Type) + len(e.Data) + len(e.Metadata)
		for _, t := range e.Tags {
			size += len(t) + 3
		}
	}
	b := make([]byte, 0, size)
	b = append(b, `{"events":`...)
	if events == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
	}
	var err error
	for i := range events {
		e := &events[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if e.ID != "" {
			b = append(b, `"id":`...)
			b = appendString(b, e.ID)
			b = append(b, ',')
		}
		b = append(b, `"type":`...)
		b = appendString(b, e.Type)
		b = append(b, `,"data":`...)
		if e.Data == nil {
			b = append(b, "null"...)
		} else if b, err = appendRaw(b, e.Data); err != nil {
			return nil, fmt.Errorf("%w: events[%d]: data is not valid JSON", event.ErrInvalid, i)
		}
		if len(e.Metadata) > 0 {
			b = append(b, `,"metadata":`...)
			if b, err = appendRaw(b, e.Metadata); err != nil {
				return nil, fmt.Errorf("%w: events[%d]: metadata is not valid JSON", event.ErrInvalid, i)
			}
		}
		if len(e.Tags) > 0 {
			b = append(b, `,"tags":[`...)
			for j, t := range e.Tags {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendString(b, t)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if events != nil {
		b = append(b, ']')
	}
	if cond != nil {
		b = append(b, `,"condition":`...)
		if b, err = appendJSON(b, cond); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendRaw appends a JSON value: as it is when it is compact, else
// compacted; an error when it is not JSON.
func appendRaw(b, raw []byte) ([]byte, error) {
	if valid, compact := rawjson.Check(raw); valid && compact {
		return append(b, raw...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, err
	}
	return buf.Bytes(), nil
}

// appendString appends s as a JSON string, as encoding/json writes it but
// without HTML escaping.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			b, _ = appendJSON(b, s) // cannot fail for a string
			return b
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSON appends v as encoding/json writes it, without HTML escaping.
func appendJSON(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
