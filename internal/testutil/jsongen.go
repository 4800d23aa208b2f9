package testutil

import (
	"math/rand/v2"
	"strings"
)

// JSONGen writes random JSON for differential tests of code that reads
// JSON by hand against encoding/json: values with whitespace between
// tokens, escapes of every kind, `<>&`, U+2028, non-ASCII text, numbers
// at the edges of the grammar, deep nesting; and, with Mutate, bytes that
// are almost JSON.
type JSONGen struct{ R *rand.Rand }

// NewJSONGen returns a generator seeded with seed.
func NewJSONGen(seed uint64) JSONGen {
	return JSONGen{R: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Space returns nothing most of the time, else some JSON whitespace.
func (g JSONGen) Space() string {
	if g.R.IntN(4) != 0 {
		return ""
	}
	return []string{" ", "\n", "\t", "\r\n  ", "  "}[g.R.IntN(5)]
}

var strParts = []string{
	"a", "order", "x y", "<", ">", "&", "<b>&amp;</b>", "é", "日本", "😀", "\u2028", "\u2029",
	`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u0041`, `\u00e9`, `\u003c`, `\u003C`, `\ud83d\ude00`,
	`\ud800`, `\udc00x`, `\u0000`, "\x7f", "}", "]", "{", "[", ",", ":", "'",
}

// String returns a JSON string (quotes included).
func (g JSONGen) String() string {
	var b strings.Builder
	b.WriteByte('"')
	for range g.R.IntN(6) {
		b.WriteString(strParts[g.R.IntN(len(strParts))])
	}
	b.WriteByte('"')
	return b.String()
}

var numbers = []string{"0", "-0", "1", "-1", "12345678901234567890123", "1.5", "-0.0", "1e3", "1E+3", "2e-300",
	"1.5e308", "9007199254740993", "-123.456e-7", "0.1", "18446744073709551615", "18446744073709551616", "1.0"}

// Value returns a JSON value nested at most depth deep.
func (g JSONGen) Value(depth int) string {
	k := g.R.IntN(10)
	if depth <= 0 && k >= 6 {
		k = g.R.IntN(6)
	}
	switch k {
	case 0, 1:
		return g.String()
	case 2:
		return numbers[g.R.IntN(len(numbers))]
	case 3:
		return []string{"true", "false", "null"}[g.R.IntN(3)]
	case 4, 5:
		return g.String()
	case 6, 7:
		var b strings.Builder
		b.WriteByte('{')
		for i := range g.R.IntN(4) {
			if i > 0 {
				b.WriteString(g.Space() + "," + g.Space())
			}
			b.WriteString(g.String() + g.Space() + ":" + g.Space() + g.Value(depth-1))
		}
		b.WriteString(g.Space() + "}")
		return b.String()
	default:
		var b strings.Builder
		b.WriteByte('[')
		for i := range g.R.IntN(4) {
			if i > 0 {
				b.WriteString(g.Space() + "," + g.Space())
			}
			b.WriteString(g.Space() + g.Value(depth-1))
		}
		b.WriteString(g.Space() + "]")
		return b.String()
	}
}

// Deep returns a value nested n deep (arrays and objects in turn).
func (g JSONGen) Deep(n int) string {
	var b strings.Builder
	for i := range n {
		if i%2 == 0 {
			b.WriteByte('[')
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString("1")
	for i := n - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteByte(']')
		} else {
			b.WriteByte('}')
		}
	}
	return b.String()
}

var junk = []string{"\xff", "\xc3", "\xed\xa0\x80", "\x00", "\x1f", " ", ",", "}", "]", "{", "[", `"`, `\`, ":", "01", "-", ".", "e", "tru", "nul", "\u00a0", "\\u12", "\\x"}

// Mutate returns b with a few bytes inserted, deleted or replaced.
func (g JSONGen) Mutate(b string) string {
	for range 1 + g.R.IntN(3) {
		i := 0
		if len(b) > 0 {
			i = g.R.IntN(len(b) + 1)
		}
		switch g.R.IntN(3) {
		case 0:
			b = b[:i] + junk[g.R.IntN(len(junk))] + b[i:]
		case 1:
			if i < len(b) {
				b = b[:i] + b[i+1:]
			}
		default:
			if i < len(b) {
				b = b[:i] + junk[g.R.IntN(len(junk))] + b[i+1:]
			}
		}
	}
	return b
}

// OrderData is the data of an order event of about size bytes (at least
// one line), compact JSON with an escaped quote: what benchmarks of the
// event body's path encode, validate and decode.
func OrderData(size int) []byte {
	var s strings.Builder
	s.WriteString(`{"order":17,"customer":"c-17","lines":[`)
	for j := 0; j == 0 || s.Len() < size-2; j++ {
		if j > 0 {
			s.WriteByte(',')
		}
		s.WriteString(`{"sku":"SKU-00042","qty":3,"price":12.50,"note":"gift \"wrap\" {no}"}`)
	}
	s.WriteString(`]}`)
	return []byte(s.String())
}
