package client

import (
	"encoding/json"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/rawjson"
)

// decodeReply decodes a reply body into v. The append's reply, decoded
// once per Append, takes a one-pass path in the form the node writes it
// (fastAppendReply); any other form, and every other reply, goes to
// encoding/json, whose result or error is then the reply's: the fast path
// never decides that a reply is wrong. encoding/json's reflection was 12%
// of a Go client's CPU in the api → live subscriber row at 5,000 events/s
// (docs/performance.md, "The live path at 5,000 events/s").
// TestAppendReplyDecodersAgree holds the two to the same results.
func decodeReply(data []byte, v any) error {
	if res, ok := v.(*event.AppendResult); ok {
		if r, ok := fastAppendReply(data); ok {
			*res = r
			return nil
		}
	}
	return json.Unmarshal(data, v)
}

// fastAppendReply decodes {"epoch":"…","first":n,"last":n}, as
// json.Marshal writes an event.AppendResult: the fields in that order, no
// whitespace, an epoch without escapes, positions as plain decimal
// integers. ok false: another form, or not a reply.
func fastAppendReply(data []byte) (r event.AppendResult, ok bool) {
	i, ok := rawjson.Literal(data, 0, `{"epoch":"`)
	if !ok {
		return r, false
	}
	end, ok := rawjson.PlainText(data, i-1)
	if !ok {
		return r, false
	}
	r.Epoch = string(data[i : end-1])
	if i, ok = rawjson.Literal(data, end, `,"first":`); !ok {
		return r, false
	}
	if r.First, i, ok = rawjson.Uint(data, i); !ok {
		return r, false
	}
	if i, ok = rawjson.Literal(data, i, `,"last":`); !ok {
		return r, false
	}
	if r.Last, i, ok = rawjson.Uint(data, i); !ok {
		return r, false
	}
	i, ok = rawjson.Literal(data, i, "}")
	return r, ok && i == len(data)
}
