package client

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// appendReplies are replies as the node writes them (json.Marshal of an
// event.AppendResult, which fastAppendReply must take) and replies in
// other forms or wrong (which it may refuse).
func appendReplies(tb testing.TB) (written, other []string) {
	tb.Helper()
	for _, r := range []event.AppendResult{
		{Epoch: "0192f0c0-0000-7000-8000-000000000001", First: 1, Last: 1},
		{Epoch: "0192f0c0-0000-7000-8000-000000000001", First: 41, Last: 140},
		{Epoch: "e", First: 18446744073709551615, Last: 18446744073709551615},
		{},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		written = append(written, string(b))
	}
	w := written[1]
	other = append(other,
		strings.Replace(w, `{"epoch"`, `{ "epoch"`, 1),                      // whitespace
		strings.Replace(w, `"epoch"`, `"Epoch"`, 1),                         // a key encoding/json matches without case
		strings.Replace(w, `"first":41`, `"first":041`, 1),                  // leading zero
		strings.Replace(w, `"first":41`, `"first":4.1e1`, 1),                // not an integer
		strings.Replace(w, `"first":41`, `"first":-41`, 1),                  // negative
		strings.Replace(w, `"first":41`, `"first":18446744073709551616`, 1), // beyond uint64
		strings.Replace(w, `"first":41`, `"first":"41"`, 1),                 // a string
		strings.Replace(w, `"epoch":"0192`, `"epoch":"\u0030192`, 1),        // an escape
		strings.Replace(w, `"epoch":"0192`, "\"epoch\":\"\xff0192", 1),      // invalid UTF-8
		strings.Replace(w, `"epoch":"0192f0c0-0000-7000-8000-000000000001"`, `"epoch":null`, 1),
		strings.Replace(w, `,"last":140}`, `,"last":140,"more":1}`, 1), // a field more
		strings.Replace(w, `,"last":140}`, `}`, 1),                     // a field less
		strings.Replace(w, `{"epoch"`, `{"first":7,"epoch"`, 1),        // a field twice
		`{"first":41,"last":140,"epoch":"e"}`,                          // another order
		w+" ", w+"x", w+"{}", w[:len(w)-1], "", "{}", "null", `{"epoch":"`,
	)
	return written, other
}

// TestAppendReplyDecodersAgree: fastAppendReply takes every reply the node
// writes (or the fast path is dead), and whenever it takes a reply its
// result is the one encoding/json decodes from it.
func TestAppendReplyDecodersAgree(t *testing.T) {
	t.Parallel()
	written, other := appendReplies(t)
	testutil.DecodersAgree(t, fastAppendReply, written, other, nil)
}

func FuzzAppendReplyDecodersAgree(f *testing.F) {
	written, other := appendReplies(f)
	testutil.FuzzDecoders(f, fastAppendReply, written, other, nil)
}
