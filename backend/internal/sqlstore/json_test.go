package sqlstore_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
)

// jsonCases are texts at the edges of the grammar, valid and not.
var jsonCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1`, `-1`, `10`, `0.5`, `-0.5e+10`, `1E5`, `1e-5`, `123456789012345678901234567890`,
	`true`, `false`, `null`, ` { "a" : [ 1 , 2 , { } , [ ] ] } `, "\t\n\r{\"a\":1}\n",
	`{"a":"b\"c\\d\/e\bf\fg\nh\ri\tj\u00e9\uD83D\uDE00"}`, `"é日本 ✓"`, "\"\xff\xfe\"", `[1,[2,[3,[4]]]]`,
	`{"a":1,"b":{"c":[true,false,null]}}`,
	``, ` `, `{`, `}`, `[`, `]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a" 1}`, `{a:1}`,
	`01`, `-`, `--1`, `+1`, `1.`, `.5`, `1e`, `1e+`, `0x10`, `NaN`, `Infinity`, `tru`, `truex`, `nul`, `True`,
	`"abc`, `"a\"`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"a\tb\"", "\"a\nb\"", "\"\x00\"", `'a'`, `{} {}`, `1 2`, `[1]]`,
	`{"a":1}}`, `[}`, `{]`, `{"a":[1}`, "\x00", "\v1", "\f1", `[1,2`, `{"a":1`,
}

// TestValidJSON: ValidJSON says what json.Valid says on the edges of the
// grammar and at the nesting limit.
func TestValidJSON(t *testing.T) {
	for _, c := range jsonCases {
		if got, want := sqlstore.ValidJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("ValidJSON(%q) = %v, json.Valid = %v", c, got, want)
		}
	}
	// Long strings with one special byte at every offset: the eight-byte
	// steps of the string scan must find each.
	for n := 1; n <= 24; n++ {
		for at := range n {
			for _, c := range []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff, 'u'} {
				text := []byte(`"` + strings.Repeat("x", n) + `"`)
				text[1+at] = c
				if got, want := sqlstore.ValidJSON(text), json.Valid(text); got != want {
					t.Errorf("ValidJSON(%q) = %v, json.Valid = %v", text, got, want)
				}
			}
		}
	}
	for _, depth := range []int{9999, 10000, 10001} {
		for _, c := range []string{strings.Repeat("[", depth) + strings.Repeat("]", depth),
			strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)} {
			if got, want := sqlstore.ValidJSON([]byte(c)), json.Valid([]byte(c)); got != want {
				t.Errorf("ValidJSON(depth %d, %.10s…) = %v, json.Valid = %v", depth, c, got, want)
			}
		}
	}
}

// FuzzValidJSON: ValidJSON and json.Valid agree on every input.
func FuzzValidJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := sqlstore.ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}
