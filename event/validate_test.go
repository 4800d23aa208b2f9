package event_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orisun-io/orisun/event"
)

func TestValidateBoundaryName(t *testing.T) {
	t.Parallel()
	valid := []string{"a", "default", "orders_2024", "a" + strings.Repeat("b", 62)}
	invalid := []string{"", "A", "1a", "_a", "a.b", "a*", "a>", "$a", "a$", "a b", "a\x00", "a-b", "é",
		"a" + strings.Repeat("b", 63), "a\n", "a/b"}
	for _, name := range valid {
		if err := event.ValidateBoundaryName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range invalid {
		err := event.ValidateBoundaryName(name)
		if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "boundary name") {
			t.Errorf("%q: got %v, want an invalid boundary name error", name, err)
		}
	}
}

func TestValidateType(t *testing.T) {
	t.Parallel()
	valid := []string{"a", "OrderPlaced", "order.placed", "order.placed.v2", "a-b_c:d", strings.Repeat("x", 255)}
	invalid := []string{"", ".", "a.", ".a", "a..b", "*", "a.*", ">", "a.>", "$SYS", "a b", "a\x00", "a\tb",
		"é", strings.Repeat("x", 256), "a/b"}
	for _, typ := range valid {
		if err := event.ValidateType(typ); err != nil {
			t.Errorf("%q: %v", typ, err)
		}
	}
	for _, typ := range invalid {
		if err := event.ValidateType(typ); !errors.Is(err, event.ErrInvalid) {
			t.Errorf("%q: got %v, want ErrInvalid", typ, err)
		}
	}
}

// TestRefusedByteNamed: the error shows the refused byte as the user
// typed it, or by its value when it is not ASCII (not as the Latin-1
// character of that value: 'é' is not refused as 'Ã').
func TestRefusedByteNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"type é", event.ValidateType("café"), "byte 3 (0xc3, not ASCII)"},
		{"boundary é", event.ValidateBoundaryName("café"), "byte 3 (0xc3, not ASCII)"},
		{"type space", event.ValidateType("a b"), "byte 1 (' ')"},
		{"boundary NUL", event.ValidateBoundaryName("a\x00"), `byte 1 ('\x00')`},
		{"boundary dot", event.ValidateBoundaryName("a.b"), "byte 1 ('.')"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || strings.Contains(c.err.Error(), "Ã") {
			t.Errorf("%s: error %v, want it to contain %q", c.name, c.err, c.want)
		}
	}
}

func TestPrepareNormalises(t *testing.T) {
	t.Parallel()
	in := []event.Input{{ID: "0190B0A0-0000-7000-8000-00000000000A", Type: "a", Data: json.RawMessage(" { \"x\" : 1 } "),
		Metadata: json.RawMessage("null")}}
	out, err := event.Prepare("b", in, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ID != "0190b0a0-0000-7000-8000-00000000000a" || string(out[0].Data) != `{"x":1}` || out[0].Metadata != nil || out[0].Tags == nil {
		t.Fatalf("not normalised: %+v", out[0])
	}
	if string(in[0].Data) != " { \"x\" : 1 } " {
		t.Fatal("input modified")
	}
	gen, err := event.Prepare("b", []event.Input{{Type: "a", Data: json.RawMessage(`1`)}}, event.Limits{})
	if err != nil || len(gen[0].ID) != 36 || gen[0].ID[14] != '7' {
		t.Fatalf("generated id %q is not a UUIDv7 (%v)", gen[0].ID, err)
	}
}

// FuzzValidateBoundaryName: whatever the input, validation never panics, and
// a name it accepts is safe as a NATS subject token, a stream name and a SQL
// value.
func FuzzValidateBoundaryName(f *testing.F) {
	for _, s := range []string{"default", "a.b", "a*", "a>", "$SYS", "a b", "a\x00", "", "Z", "a_1", "café", "a\n",
		strings.Repeat("a", 63), strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := event.ValidateBoundaryName(name)
		// The exact rule of docs/design.md §3, both ways: nothing else is
		// accepted, and nothing it allows is refused.
		if want := boundaryNameRE.MatchString(name); (err == nil) != want {
			t.Fatalf("ValidateBoundaryName(%q) = %v, the rule ^[a-z][a-z0-9_]{0,62}$ says valid=%v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "boundary name") {
				t.Fatalf("ValidateBoundaryName(%q) = %v: want ErrInvalid naming the boundary name", name, err)
			}
			return
		}
		if name == "" || len(name) > 63 || strings.ContainsAny(name, ".*>$ \t\r\n\x00'\"\\/-") || !utf8.ValidString(name) {
			t.Fatalf("accepted an unsafe name %q", name)
		}
	})
}

// boundaryNameRE and typeRE are the documented rules (docs/design.md §3, README
// "Events and limits") that the fuzz targets hold the validators to.
var (
	boundaryNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	typeRE         = regexp.MustCompile(`^[A-Za-z0-9_:-]+(\.[A-Za-z0-9_:-]+)*$`)
)

// FuzzValidateType: a type it accepts is one or more non-empty subject
// tokens without wildcards, whitespace or '$', so it can only ever extend the
// boundary's subject, never escape it.
func FuzzValidateType(f *testing.F) {
	for _, s := range []string{"a", "a.b", "a..b", "a.*", ">", "$SYS.x", "a b", "a\x00", ".", "a.", "order.placed.v2",
		"a-b_c:D", "café", "a\n", strings.Repeat("x", 255), strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		err := event.ValidateType(typ)
		if want := typeRE.MatchString(typ) && len(typ) <= event.MaxTypeLen; (err == nil) != want {
			t.Fatalf("ValidateType(%q) = %v, the documented rule says valid=%v", typ, err, want)
		}
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "type") {
				t.Fatalf("ValidateType(%q) = %v: want ErrInvalid naming the type", typ, err)
			}
			return
		}
		if typ == "" || len(typ) > event.MaxTypeLen || strings.ContainsAny(typ, "*>$ \t\r\n\x00") {
			t.Fatalf("accepted an unsafe type %q", typ)
		}
		for _, tok := range strings.Split(typ, ".") {
			if tok == "" {
				t.Fatalf("accepted %q with an empty token", typ)
			}
		}
	})
}

// FuzzPrepare: arbitrary events never panic; accepted ones have valid JSON
// data and a canonical id.
func FuzzPrepare(f *testing.F) {
	f.Add("a", []byte(`{}`), []byte(``), "t")
	f.Add("a.b", []byte(`{"x":[1,2]}`), []byte(`{"m":1}`), "tag")
	f.Add("a", []byte(`{`), []byte(`x`), "")
	f.Add("a", []byte("\x00"), []byte(`null`), "\x00")
	f.Fuzz(func(t *testing.T, typ string, data, md []byte, tag string) {
		out, err := event.Prepare("b", []event.Input{{Type: typ, Data: data, Metadata: md, Tags: []string{tag}}},
			event.Limits{MaxEventBytes: 1 << 20})
		if err != nil {
			if !errors.Is(err, event.ErrInvalid) && !errors.Is(err, event.ErrTooLarge) {
				t.Fatalf("error %v is neither invalid nor too large", err)
			}
			return
		}
		if !json.Valid(out[0].Data) || (out[0].Metadata != nil && !json.Valid(out[0].Metadata)) || len(out[0].ID) != 36 {
			t.Fatalf("accepted bad event %+v", out[0])
		}
	})
}

// TestValidateQuery: the empty query (nil, no items, an item without types
// and tags) is valid and matches every event; bad values and oversized
// queries are refused with the item named.
func TestValidateQuery(t *testing.T) {
	t.Parallel()
	e := &event.Event{Type: "order.placed", Tags: []string{"order:1"}}
	for name, q := range map[string]*event.Query{
		"nil":         nil,
		"no items":    {},
		"empty items": {Items: []event.QueryItem{}},
		"empty item":  {Items: []event.QueryItem{{}}},
	} {
		if err := event.ValidateQuery(q); err != nil {
			t.Errorf("%s: %v, want valid", name, err)
		}
		if !q.Matches(e) {
			t.Errorf("%s: does not match an event; the empty query matches every event", name)
		}
	}
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s + strings.Repeat("x", i%10) + string(rune('a'+i%26))
		}
		return out
	}
	for _, c := range []struct {
		name   string
		q      event.Query
		target error
		says   string
	}{
		{"bad type", event.Query{Items: []event.QueryItem{{}, {Types: []string{"a.*"}}}}, event.ErrInvalid, "query item 1"},
		{"empty tag", event.Query{Items: []event.QueryItem{{Tags: []string{""}}}}, event.ErrInvalid, "query item 0"},
		{"too many items", event.Query{Items: make([]event.QueryItem, event.MaxQueryItems+1)}, event.ErrTooLarge, "items"},
		{"too many types", event.Query{Items: []event.QueryItem{{Types: many(event.MaxQueryTypes+1, "t")}}}, event.ErrTooLarge, "types"},
		{"too many tags", event.Query{Items: []event.QueryItem{{Tags: many(event.MaxQueryTags+1, "t")}}}, event.ErrTooLarge, "tags"},
	} {
		err := event.ValidateQuery(&c.q)
		if !errors.Is(err, c.target) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v naming %q", c.name, err, c.target, c.says)
		}
	}
}

// TestPrepareRefusesBadJSON: data and metadata that are not JSON (also
// with something after the value, or invalid UTF-8 in a string) are
// refused with an error naming the event and the field, and nothing is
// returned.
func TestPrepareRefusesBadJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		data, md string
		want     string
	}{
		{"data cut short", `{"a":`, "", "data is not valid JSON"},
		{"data with a trailing value", `{"a":1} 2`, "", "data is not valid JSON"},
		{"data not JSON at all", `a`, "", "data is not valid JSON"},
		{"data with invalid UTF-8", "\"\xff\"", "", "data is not valid UTF-8"},
		{"data missing", ``, "", "data is missing"},
		{"metadata with a trailing comma", `1`, `[1,]`, "metadata is not valid JSON"},
	} {
		in := []event.Input{
			{Type: "a", Data: json.RawMessage(`{}`)},
			{Type: "a", Data: json.RawMessage(c.data), Metadata: json.RawMessage(c.md)},
		}
		out, err := event.Prepare("b", in, event.Limits{})
		if !errors.Is(err, event.ErrInvalid) || !strings.HasPrefix(err.Error(), "events[1]: ") || !strings.Contains(err.Error(), c.want) || out != nil {
			t.Errorf("%s: got %v (%d events), want ErrInvalid for events[1] containing %q and no events", c.name, err, len(out), c.want)
		}
	}
}

// TestPrepareRefusesDuplicateIDs: an id given twice in one append is
// refused, naming both events, in appends of a few events (whose ids are
// compared with each other) and of many (looked up in a map), with the
// second at every place; ids that differ only in case are the same id.
// Appends of distinct ids, and of ids left to Prepare, pass.
func TestPrepareRefusesDuplicateIDs(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 8, 9, 100} {
		in := make([]event.Input, n)
		for i := range in {
			in[i] = event.Input{ID: event.NewID(), Type: "t", Data: json.RawMessage(`1`)}
		}
		if _, err := event.Prepare("b", in, event.Limits{}); err != nil {
			t.Fatalf("%d distinct ids: %v", n, err)
		}
		anon := make([]event.Input, n)
		for i := range anon {
			anon[i] = event.Input{Type: "t", Data: json.RawMessage(`1`)}
		}
		if _, err := event.Prepare("b", anon, event.Limits{}); err != nil {
			t.Fatalf("%d generated ids: %v", n, err)
		}
		for first := range n {
			for second := first + 1; second < n; second++ {
				dup := append([]event.Input(nil), in...)
				dup[second].ID = strings.ToUpper(in[first].ID)
				_, err := event.Prepare("b", dup, event.Limits{})
				want := fmt.Sprintf("events[%d].id: %s is also the id of events[%d]", second, in[first].ID, first)
				if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), want) {
					t.Fatalf("%d events, id of %d again at %d: %v, want %q", n, first, second, err, want)
				}
			}
		}
	}
}
