package testutil

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FastDecoder is a one-pass decoder of the form orisun writes, which
// refuses (ok false) whatever else it meets, leaving it to encoding/json.
type FastDecoder[T any] func([]byte) (T, bool)

// DecodersAgree holds a fast decoder to encoding/json: it must take every
// body of written (the form orisun writes; else the fast path is dead),
// and whatever body of written or other it takes, encoding/json must
// decode to the same value. normalize, when not nil, adjusts
// encoding/json's value to what the caller makes of it on either path.
func DecodersAgree[T any](t *testing.T, fast FastDecoder[T], written, other []string, normalize func(*T)) {
	t.Helper()
	for _, b := range written {
		if _, ok := fast([]byte(b)); !ok {
			t.Errorf("the fast decoder refused what orisun writes: %s", b)
		}
		DecoderAgrees(t, fast, b, normalize)
	}
	for _, b := range other {
		DecoderAgrees(t, fast, b, normalize)
	}
}

// FuzzDecoders fuzzes DecoderAgrees from the bodies of written and
// other.
func FuzzDecoders[T any](f *testing.F, fast FastDecoder[T], written, other []string, normalize func(*T)) {
	for _, b := range append(append([]string{}, written...), other...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b string) { DecoderAgrees(t, fast, b, normalize) })
}

// DecoderAgrees fails when fast takes body and encoding/json refuses it or
// decodes another value.
func DecoderAgrees[T any](t testing.TB, fast FastDecoder[T], body string, normalize func(*T)) {
	t.Helper()
	got, ok := fast([]byte(body))
	if !ok {
		return
	}
	var want T
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Errorf("the fast decoder took a body encoding/json refuses (%v): %q", err, body)
		return
	}
	if normalize != nil {
		normalize(&want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the fast decoder and encoding/json disagree on %q:\nfast %#v\njson %#v", body, got, want)
	}
}
