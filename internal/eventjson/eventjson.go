// Package eventjson writes the events of an append request as JSON the way
// package client sends them: field for field what encoding/json writes,
// but with data and metadata as the application gave them when they are
// compact JSON, and nothing HTML-escaped (`<`, `>`, `&`, U+2028 and U+2029
// stay as they are). Package client and package outbox both use it, so an
// event sent through either is stored as the same bytes. Being internal, it
// is orisun's machinery: its API may change without notice.
package eventjson

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/rawjson"
)

// Size is a capacity that holds the encoding of events, for the caller's
// buffer.
func Size(events []event.Input) int {
	size := 64
	for i := range events {
		e := &events[i]
		size += 96 + len(e.ID) + len(e.Type) + len(e.Data) + len(e.Metadata)
		for _, t := range e.Tags {
			size += len(t) + 3
		}
	}
	return size
}

// AppendEvents appends events as the JSON array of an append request's
// "events" (null for nil). Data or metadata that is not JSON is an error
// wrapping event.ErrInvalid that names the event and the field.
func AppendEvents(b []byte, events []event.Input) ([]byte, error) {
	if events == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	var err error
	for i := range events {
		e := &events[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if e.ID != "" {
			b = append(b, `"id":`...)
			b = AppendString(b, e.ID)
			b = append(b, ',')
		}
		b = append(b, `"type":`...)
		b = AppendString(b, e.Type)
		b = append(b, `,"data":`...)
		if e.Data == nil {
			b = append(b, "null"...)
		} else if b, err = AppendRaw(b, e.Data); err != nil {
			return nil, fmt.Errorf("%w: events[%d]: data is not valid JSON", event.ErrInvalid, i)
		}
		if len(e.Metadata) > 0 {
			b = append(b, `,"metadata":`...)
			if b, err = AppendRaw(b, e.Metadata); err != nil {
				return nil, fmt.Errorf("%w: events[%d]: metadata is not valid JSON", event.ErrInvalid, i)
			}
		}
		if len(e.Tags) > 0 {
			b = append(b, `,"tags":[`...)
			for j, t := range e.Tags {
				if j > 0 {
					b = append(b, ',')
				}
				b = AppendString(b, t)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// AppendRaw appends a JSON value: as it is when it is compact, else
// compacted; an error when it is not JSON.
func AppendRaw(b, raw []byte) ([]byte, error) {
	if valid, compact := rawjson.Check(raw); valid && compact {
		return append(b, raw...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, err
	}
	return buf.Bytes(), nil
}

// AppendString appends s as a JSON string, as encoding/json writes it but
// without HTML escaping.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			b, _ = AppendJSON(b, s) // cannot fail for a string
			return b
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendJSON appends v as encoding/json writes it, without HTML escaping.
func AppendJSON(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
