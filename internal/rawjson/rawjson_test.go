package rawjson_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orisun-io/orisun/internal/rawjson"
	"github.com/orisun-io/orisun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// reference is what Check must say of b: valid is encoding/json's
// json.Valid and utf8.Valid (a value nested deeper than MaxDepth may be
// refused), compact that json.Compact leaves it as it is.
func reference(b []byte) (valid, compact bool) {
	if !json.Valid(b) || !utf8.Valid(b) {
		return false, false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return false, false
	}
	return true, bytes.Equal(buf.Bytes(), b)
}

func check(t *testing.T, b []byte) {
	t.Helper()
	valid, compact := rawjson.Check(b)
	wantValid, wantCompact := reference(b)
	if valid && !wantValid {
		t.Fatalf("Check accepts %q, which encoding/json or utf8.Valid refuses", b)
	}
	if !valid && wantValid && depth(b) <= rawjson.MaxDepth {
		t.Fatalf("Check refuses %q, which is valid JSON", b)
	}
	if valid && compact != wantCompact {
		t.Fatalf("Check says compact=%v of %q, json.Compact %v", compact, b, wantCompact)
	}
}

func depth(b []byte) int {
	d, most := 0, 0
	for _, c := range b {
		switch c {
		case '{', '[':
			d++
			most = max(most, d)
		case '}', ']':
			d--
		}
	}
	return most
}

var cases = []string{
	`0`, `-0`, `01`, `-`, `1.`, `1.e3`, `.5`, `1e`, `1e+`, `1E-0`, `+1`, `0x1`, `1.5e308`, `-12.5E+3`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `NULL`,
	`""`, `"a"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\x"`, `"\'"`, `"a` + "\x00" + `"`, `"a` + "\t" + `"`, `"a` + "\x7f" + `"`,
	`"é"`, "\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc3\"", `"\ud800"`, `"<>&"`, "\"\u2028\"", `"\"`, `"\\"`,
	`{}`, `[]`, `{ }`, `[ ]`, `{"a":1}`, `{"a" :1}`, `{"a": 1}`, `{"a":1 }`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`,
	`{"a"}`, `{"a":}`, `{1:2}`, `[1 2]`, `{"a":1 "b":2}`, `[}`, `{]`, `[[[]]]`, `[[[]]`, `{"a":[{"b":{}}]}`,
	` 1`, `1 `, "[1,\n2]", "[1,\r2]", "[1,\t2]", "[1,\u00a02]", `[1][2]`, `{}{}`, ``,
}

func TestCheckAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		check(t, []byte(c))
	}
	for _, d := range []int{rawjson.MaxDepth - 1, rawjson.MaxDepth, rawjson.MaxDepth + 1, 10001} {
		g := testutil.NewJSONGen(1)
		b := []byte(g.Deep(d))
		check(t, b)
		if valid, _ := rawjson.Check(b); valid != (d <= rawjson.MaxDepth) {
			t.Fatalf("nested %d deep: valid %v", d, valid)
		}
	}
	g := testutil.NewJSONGen(22)
	for i := range 200000 {
		v := g.Value(4)
		if i%2 == 1 {
			v = g.Mutate(v)
		}
		check(t, []byte(v))
	}
}

// TestValueStopsAtTheValue: Value returns the end of the value, whatever
// follows it; a truncated value is refused.
func TestValueStopsAtTheValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, value string }{
		{`{"a":[1,"]"]},"b"`, `{"a":[1,"]"]}`}, {`12,3`, `12`}, {`"a\"b"c`, `"a\"b"`}, {`null}`, `null`}, {`[ ] ]`, `[ ]`},
	} {
		end, _, ok := rawjson.Value([]byte(c.in), 0)
		if !ok || c.in[:end] != c.value {
			t.Fatalf("Value(%q) = %q, %v; want %q", c.in, c.in[:end], ok, c.value)
		}
	}
	for _, c := range []string{`{"a":1`, `[1,2`, `"abc`, `"a\`, `"\u12`, `-`, `[`} {
		if _, _, ok := rawjson.Value([]byte(c), 0); ok {
			t.Fatalf("Value accepts the truncated %q", c)
		}
	}
	if end, ok := rawjson.Plain([]byte(`"abc" `), 0); !ok || end != 5 {
		t.Fatalf("Plain: %d %v", end, ok)
	}
	for _, c := range []string{`"a\"b"`, `"é"`, `"a`, "\"a\tb\""} {
		if _, ok := rawjson.Plain([]byte(c), 0); ok {
			t.Fatalf("Plain accepts %q", c)
		}
	}
}

func FuzzCheck(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Add([]byte(strings.Repeat("[", 2000) + strings.Repeat("]", 2000)))
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}

// BenchmarkCheck: 1 KB of an event's data, against json.Valid.
func BenchmarkCheck(b *testing.B) {
	data := testutil.OrderData(1000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if ok, _ := rawjson.Check(data); !ok {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkJSONValid(b *testing.B) {
	data := testutil.OrderData(1000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if !json.Valid(data) {
			b.Fatal("invalid")
		}
	}
}

// TestUintAndSlice: Uint reads what encoding/json decodes into a uint64
// and nothing else (no sign, leading zero, fraction or overflow), and
// Slice returns the value capped, so that appending to it leaves the
// input alone.
func TestUintAndSlice(t *testing.T) {
	for in, want := range map[string]bool{"0": true, "7,": true, "18446744073709551615": true,
		"18446744073709551616": false, "01": false, "-1": false, "": false, "x": false} {
		n, end, ok := rawjson.Uint([]byte(in), 0)
		var ref uint64
		refOK := json.Unmarshal([]byte(strings.TrimSuffix(in, ",")), &ref) == nil
		if ok != want || ok != refOK || ok && (n != ref || end != len(strings.TrimSuffix(in, ","))) {
			t.Errorf("Uint(%q) = %d, %d, %v; want ok %v (encoding/json: %d, %v)", in, n, end, ok, want, ref, refOK)
		}
	}
	data := []byte(`{"a":[1,2]}x`)
	v, end, ok := rawjson.Slice(data, 0)
	if !ok || string(v) != `{"a":[1,2]}` || end != 11 {
		t.Fatalf("Slice = %q, %d, %v", v, end, ok)
	}
	_ = append(v, 'y')
	if data[11] != 'x' {
		t.Fatalf("appending to Slice's value wrote into its input: %q", data)
	}
	if _, _, ok := rawjson.Slice([]byte(`{"a":`), 0); ok {
		t.Fatal("Slice took a value cut short")
	}
}
