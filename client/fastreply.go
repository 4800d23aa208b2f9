package client

import (
	"encoding/json"
	"strconv"

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
	i, ok := lit(data, 0, `{"epoch":"`)
	if !ok {
		return r, false
	}
	end, ok := rawjson.PlainText(data, i-1)
	if !ok {
		return r, false
	}
	r.Epoch = string(data[i : end-1])
	if i, ok = lit(data, end, `,"first":`); !ok {
		return r, false
	}
	if r.First, i, ok = decimal(data, i); !ok {
		return r, false
	}
	if i, ok = lit(data, i, `,"last":`); !ok {
		return r, false
	}
	if r.Last, i, ok = decimal(data, i); !ok {
		return r, false
	}
	i, ok = lit(data, i, "}")
	return r, ok && i == len(data)
}

// lit reads s at data[i] and returns the index after it.
func lit(data []byte, i int, s string) (int, bool) {
	if len(data)-i < len(s) || string(data[i:i+len(s)]) != s {
		return i, false
	}
	return i + len(s), true
}

// decimal reads an unsigned integer at data[i] (digits, no leading zero,
// within uint64) and returns the index after it.
func decimal(data []byte, i int) (uint64, int, bool) {
	j := i
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == i || data[i] == '0' && j-i > 1 {
		return 0, i, false
	}
	n, err := strconv.ParseUint(string(data[i:j]), 10, 64)
	return n, j, err == nil
}
