package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
)

// keyCases are bodies with and without a key given twice; path and key
// name the duplicate ("" when there is none).
var keyCases = []struct {
	name      string
	rule      keyRule
	body      string
	path, key string
}{
	{"plain append", rawEvents, `{"events":[{"id":"0190b0a0-0000-7000-8000-00000000000a","type":"a","data":{"x":1},"metadata":{"y":2},"tags":["t"]}],"condition":{"query":{"items":[{"types":["a"],"tags":["t"]}]},"after":3}}`, "", ""},
	{"condition twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"after":0},"condition":null}`, "", "condition"},
	{"events twice", rawEvents, `{"events":[{"type":"a","data":1}],"events":[]}`, "", "events"},
	{"escaped key", rawEvents, `{"condition":{"after":0},"events":[{"type":"a","data":1}],"\u0063ondition":null}`, "", "condition"},
	{"key in other case", rawEvents, `{"condition":{"after":0},"events":[{"type":"a","data":1}],"Condition":null}`, "", "Condition"},
	{"key folded from U+017F", rawEvents, `{"events":[{"type":"a","data":1,"tags":["x"],"tag\u017f":[]}]}`, "events[0]", "tagſ"},
	{"event type twice", rawEvents, `{"events":[{"type":"a","data":1},{"type":"a","data":1},{"type":"a","data":1},{"type":"a","type":"b","data":1}]}`, "events[3]", "type"},
	{"event id twice", rawEvents, `{"events":[{"id":"0190b0a0-0000-7000-8000-00000000000a","type":"a","data":1,"id":"0190b0a0-0000-7000-8000-00000000000b"}]}`, "events[0]", "id"},
	{"event data twice", rawEvents, `{"events":[{"type":"a","data":{"x":1},"data":{"x":2}}]}`, "events[0]", "data"},
	{"event metadata twice", rawEvents, `{"events":[{"type":"a","data":1,"metadata":null,"metadata":{"by":"x"}}]}`, "events[0]", "metadata"},
	{"event tags twice", rawEvents, `{"events":[{"type":"a","data":1,"tags":["x"],"tags":[]}]}`, "events[0]", "tags"},
	{"condition query twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"query":{"items":[]},"after":1,"query":null}}`, "condition", "query"},
	{"condition after twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"after":5,"after":0}}`, "condition", "after"},
	{"query items twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"query":{"items":[{"tags":["x"]}],"items":[]}}}`, "condition.query", "items"},
	{"query item types twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"query":{"items":[{},{"types":["a"],"types":[]}]}}}`, "condition.query.items[1]", "types"},
	{"query item tags twice", rawEvents, `{"events":[{"type":"a","data":1}],"condition":{"query":{"items":[{"tags":["a"],"Tags":[]}]}}}`, "condition.query.items[0]", "Tags"},
	// data and metadata are the application's JSON: stored as given.
	{"duplicates inside data", rawEvents, `{"events":[{"type":"a","data":{"x":1,"x":2,"y":{"z":[{"q":1,"q":2}]}}}]}`, "", ""},
	{"duplicates inside metadata", rawEvents, `{"events":[{"type":"a","data":1,"metadata":{"by":"a","by":"b"}}]}`, "", ""},
	{"duplicates inside escaped-key metadata", rawEvents, `{"events":[{"type":"a","data":1,"\u006detadata":{"by":"a","by":"b"}}]}`, "", ""},
	{"duplicates inside data in other case", rawEvents, `{"events":[{"type":"a","DATA":{"x":1,"x":2}}]}`, "", ""},
	{"data with brackets and quotes in strings", rawEvents,
		`{"events":[{"data":{"s":"}]\"{[\\","s":[{"x":"\"}","x":2}],"n":[1,2.5e3,true,false,null]},"type":"a","type":"b"}]}`, "events[0]", "type"},
	{"data a string of JSON", rawEvents, `{"events":[{"type":"a","data":"{\"x\":1,\"x\":2}"}]}`, "", ""},
	{"data a number then a duplicate", rawEvents, `{"events":[{"data":-1.5e-3 ,"type":"a","type":"a"}]}`, "events[0]", "type"},
	{"data empty object then a duplicate", rawEvents, `{"events":[{"data":{},"tags":[],"tags":[]}]}`, "events[0]", "tags"},
	{"whitespace", rawEvents, "{ \"events\" :\n[ { \"type\" : \"a\" ,\t\"data\" : { \"x\" : 1 , \"x\" : 2 } } ] ,\r\n \"events\" : [ ] }", "", "events"},
	{"a key spelled apart", rawEvents, `{"events":[{"type":"a","data":1,"tag":["x"],"tags":["y"]}]}`, "", ""},
	// Every object of the other requests is envelope.
	{"read after twice", checkAll, `{"after":5,"limit":10,"after":0}`, "", "after"},
	{"read limit twice", checkAll, `{"limit":10,"limit":10}`, "", "limit"},
	{"read query twice", checkAll, `{"query":{"items":[{"tags":["x"]}]},"query":null}`, "", "query"},
	{"read query item tags twice", checkAll, `{"after":0,"query":{"items":[{"types":["a"]},{"tags":["x"],"tags":["y"]}]}}`, "query.items[1]", "tags"},
	{"latest query twice", checkAll, `{"query":null,"query":{}}`, "", "query"},
	{"create name twice", checkAll, `{"name":"a","name":"b"}`, "", "name"},
	{"create name twice escaped", checkAll, `{"name":"a","n\u0061me":"b"}`, "", "name"},
	{"no duplicate in a read", checkAll, `{"after":0,"limit":10,"query":{"items":[{"types":["a"],"tags":["x"]}]}}`, "", ""},
	{"checkAll looks into data", checkAll, `{"events":[{"type":"a","data":{"x":1,"x":2}}]}`, "events[0].data", "x"},
	{"many keys", checkAll, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"a":11}`, "", "a"},
	{"empty body", checkAll, `{}`, "", ""},
	{"scalar body", checkAll, `null`, "", ""},
	{"nested object", checkAll, `{"a":{"b":1,"B":2}}`, "a", "B"},
}

func TestDuplicateKeyScanner(t *testing.T) {
	t.Parallel()
	for _, c := range keyCases {
		t.Run(c.name, func(t *testing.T) {
			if !json.Valid([]byte(c.body)) {
				t.Fatalf("case body is not JSON: %s", c.body)
			}
			err := duplicateKey([]byte(c.body), c.rule, "the test request")
			want, wantErr := reference([]byte(c.body), c.rule)
			if wantErr != nil {
				t.Fatalf("reference: %v", wantErr)
			}
			var dk *dupKeyError
			if c.key == "" {
				if err != nil {
					t.Fatalf("got %v, want no duplicate", err)
				}
				if want != nil {
					t.Fatalf("the reference finds %+v", want)
				}
				return
			}
			if !errors.As(err, &dk) {
				t.Fatalf("got %v, want a duplicate %q at %q", err, c.key, c.path)
			}
			if got := pathString(dk.path); dk.key != c.key || got != c.path {
				t.Fatalf("got key %q at %q, want %q at %q (%v)", dk.key, got, c.key, c.path, err)
			}
			if want == nil || want.key != dk.key || pathString(want.path) != c.path {
				t.Fatalf("the scanner finds %q at %q, the reference %+v", dk.key, c.path, want)
			}
			msg := err.Error()
			if !strings.Contains(msg, `duplicate key "`+c.key+`" in the test request`) ||
				c.path != "" && !strings.HasPrefix(msg, c.path+": ") {
				t.Fatalf("message %q names neither the key %q nor where it is (%q)", msg, c.key, c.path)
			}
		})
	}
}

// TestDecodeRefusesDuplicateKeys: decode, what every endpoint runs, refuses
// a duplicate key with ErrInvalid after the checks it made before (unknown
// fields are still named as such), and decodes data and metadata with
// duplicate keys inside as given.
func TestDecodeRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	var r api.AppendRequest
	err := decode([]byte(`{"events":[{"type":"a","data":1}],"condition":{"after":0},"condition":null}`), &r, "the append request", "…", rawEvents)
	if !errors.Is(err, event.ErrInvalid) || api.CodeOf(err) != api.CodeInvalid ||
		err.Error() != `invalid: duplicate key "condition" in the append request; give each key once` {
		t.Fatalf("got %v", err)
	}
	err = decode([]byte(`{"events":[{"type":"a","data":1,"tag":["x"],"type":"b"}]}`), &r, "the append request", "…", rawEvents)
	if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), `unknown field "tag"`) {
		t.Fatalf("got %v, want the unknown field named first", err)
	}
	r = api.AppendRequest{}
	body := `{"events":[{"type":"a","data":{"x":1, "x":2},"metadata":{"by":"a","by":"b"}}]}`
	if err := decode([]byte(body), &r, "the append request", "…", rawEvents); err != nil {
		t.Fatal(err)
	}
	if string(r.Events[0].Data) != `{"x":1, "x":2}` || string(r.Events[0].Metadata) != `{"by":"a","by":"b"}` {
		t.Fatalf("decoded %s and %s", r.Events[0].Data, r.Events[0].Metadata)
	}
}

func pathString(p []string) string {
	var b strings.Builder
	for i := len(p) - 1; i >= 0; i-- {
		if b.Len() > 0 && !strings.HasPrefix(p[i], "[") {
			b.WriteByte('.')
		}
		b.WriteString(p[i])
	}
	return b.String()
}

// FuzzDuplicateKey: the scanner never panics nor loops, whatever the body;
// on valid JSON it finds the duplicate the reference finds (the same key at
// the same place) and none when the reference finds none; and decode never
// accepts a body the reference finds a duplicate in.
func FuzzDuplicateKey(f *testing.F) {
	for _, c := range keyCases {
		f.Add([]byte(c.body), c.rule == rawEvents)
	}
	f.Add([]byte(`{"events":[{"data":"\\"}]}`), true)
	f.Add([]byte(`{"events":[{"data":[1,{"a":"]"}]},"data":2}]}`), true)
	f.Add([]byte(`[[{"data":{"a":1,"a":1}}]]`), true)
	f.Add([]byte(`{"a":"\ud800","b":"x","\ufffd":1,"`+"\xff"+`":2}`), false)
	f.Add([]byte(`{"":{"":1,"":2}}`), false)
	f.Add([]byte(`{"a":1`+strings.Repeat("0", 400)+`,"a":2}`), false)
	f.Fuzz(func(t *testing.T, body []byte, events bool) {
		// A loop that never ends would stall the fuzzer without a report:
		// make it a crash, which the fuzzer keeps as a failing input.
		wd := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("duplicateKey has not returned after 5s on %q (events %v)", body, events)) })
		defer wd.Stop()
		rule := checkAll
		if events {
			rule = rawEvents
		}
		err := duplicateKey(body, rule, "the fuzz request")
		if !json.Valid(body) {
			return
		}
		want, refErr := reference(body, rule)
		if refErr != nil {
			t.Fatalf("reference on valid JSON: %v", refErr)
		}
		var dk *dupKeyError
		switch {
		case want == nil && err != nil:
			t.Fatalf("%q: the scanner says %v, the reference finds no duplicate", body, err)
		case want != nil && !errors.As(err, &dk):
			t.Fatalf("%q: the reference finds %q at %q, the scanner says %v", body, want.key, pathString(want.path), err)
		case want != nil && (dk.key != want.key || pathString(dk.path) != pathString(want.path)):
			t.Fatalf("%q: the scanner finds %q at %q, the reference %q at %q", body, dk.key, pathString(dk.path), want.key, pathString(want.path))
		}
		if want != nil && rule == rawEvents {
			var r api.AppendRequest
			if decode(body, &r, "the append request", "…", rule) == nil {
				t.Fatalf("%q: decode accepted a body with a duplicate %q", body, want.key)
			}
		}
	})
}

// reference finds the first duplicate key in a valid JSON body another
// way: encoding/json's tokens, a map per object keyed by the key folded as
// encoding/json folds field names, and data and metadata of the objects in
// a top-level array skipped by decoding them whole (rawEvents).
type refDup struct {
	path       []string // innermost last, as dupKeyError's
	key, first string
}

func reference(body []byte, rule keyRule) (*refDup, error) {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber() // a number too large for a float64 is still JSON
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	return refValue(dec, tok, rule, 0, false)
}

func refValue(dec *json.Decoder, tok json.Token, rule keyRule, depth int, events bool) (*refDup, error) {
	switch tok {
	case json.Delim('{'):
		return refObject(dec, rule, depth+1, false)
	case json.Delim('['):
		return refArray(dec, rule, depth+1, events)
	}
	return nil, nil
}

func refArray(dec *json.Decoder, rule keyRule, depth int, events bool) (*refDup, error) {
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var d *refDup
		if events && tok == json.Delim('{') {
			d, err = refObject(dec, rule, depth+1, true)
		} else {
			d, err = refValue(dec, tok, rule, depth, false)
		}
		if err != nil || d != nil {
			if d != nil {
				d.path = append(d.path, "["+strconv.Itoa(i)+"]")
			}
			return d, err
		}
	}
	_, err := dec.Token() // ]
	return nil, err
}

func refObject(dec *json.Decoder, rule keyRule, depth int, event bool) (*refDup, error) {
	seen := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		f := fold(key)
		if first, ok := seen[f]; ok {
			return &refDup{key: key, first: first}, nil
		}
		seen[f] = key
		if event && (f == fold("data") || f == fold("metadata")) {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, err
		}
		d, err := refValue(dec, tok, rule, depth, depth == 1 && rule == rawEvents)
		if err != nil || d != nil {
			if d != nil {
				d.path = append(d.path, key)
			}
			return d, err
		}
	}
	if _, err := dec.Token(); err != nil && err != io.EOF { // }
		return nil, err
	}
	return nil, nil
}

// fold is encoding/json's folding of field names: each rune to the
// smallest of its simple case-fold orbit (ASCII letters to upper case).
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			continue
		}
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b.WriteRune(r)
	}
	return b.String()
}
