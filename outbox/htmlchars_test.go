package outbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
)

// TestRetryAcrossPathsWithHTMLCharacters: an event whose data and metadata
// hold '<', '>', '&', U+2028 and U+2029 is the same event whichever path
// wrote it. The Go append (what the client's requests become in the node)
// stores the characters as they are; package outbox sends them as they are
// too (internal/eventjson, as package client), and the SQL functions judge
// an id stored with those characters written as \u escapes (json.Marshal's
// HTML escaping, which another writer may use) the same content. So a retry
// through the other path returns the original positions and writes
// nothing, through orisun_append, orisun_enqueue and the mover alike, in
// both directions: no conflict, nothing set aside.
func TestRetryAcrossPathsWithHTMLCharacters(t *testing.T) {
	const (
		raw     = `{"note":"<b>fish & chips</b>","sep":"` + "\u2028\u2029" + `"}`
		escaped = `{"note":"\u003cb\u003efish \u0026 chips\u003c/b\u003e","sep":"\u2028\u2029"}`
		mdRaw   = `{"by":"<ops&co>"}`
		mdEsc   = `{"by":"\u003cops\u0026co\u003e"}`
	)
	ev := func(id, data, md string) []event.Input {
		return []event.Input{{ID: id, Type: "order.noted", Data: json.RawMessage(data), Metadata: json.RawMessage(md),
			Tags: []string{"order:<1>&"}}}
	}
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		ctx := context.Background()
		inTx := func(fn func(tx appTx) error) {
			t.Helper()
			tx := begin()
			if err := fn(tx); err != nil {
				_ = tx.rollback()
				t.Fatal(err)
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
		}
		appendTx := func(evs []event.Input) (res event.AppendResult) {
			t.Helper()
			inTx(func(tx appTx) (err error) { res, err = tx.append("orders", evs, nil); return err })
			return res
		}
		enqueueTx := func(evs []event.Input) (n int) {
			t.Helper()
			inTx(func(tx appTx) (err error) { n, err = tx.enqueue("orders", evs); return err })
			return n
		}
		goAppend := func(evs []event.Input) event.AppendResult {
			t.Helper()
			res, err := f.store.Append(ctx, "orders", evs, nil)
			if err != nil {
				t.Fatalf("the Go append: %v", err)
			}
			return res
		}

		// The Go append first (raw characters stored), then retries
		// through orisun_append and orisun_enqueue, given raw and escaped.
		a := "0190a7e0-0000-7000-8000-00000000000a"
		first := goAppend(ev(a, raw, mdRaw))
		for _, evs := range [][]event.Input{ev(a, raw, mdRaw), ev(a, escaped, mdEsc)} {
			if res := appendTx(evs); res != first {
				t.Fatalf("orisun_append retry of the Go append's event: %+v, want %+v", res, first)
			}
			if n := enqueueTx(evs); n != 0 {
				t.Fatalf("orisun_enqueue retry of the Go append's event staged %d, want 0 (a no-op)", n)
			}
		}
		// The reverse: orisun_append first, with the escapes as given
		// (stored so), then the Go append and orisun_append with raw text.
		b := "0190a7e0-0000-7000-8000-00000000000b"
		second := appendTx(ev(b, escaped, mdEsc))
		if res := goAppend(ev(b, raw, mdRaw)); res != second {
			t.Fatalf("Go append retry of orisun_append's event: %+v, want %+v", res, second)
		}
		if res := appendTx(ev(b, raw, mdRaw)); res != second {
			t.Fatalf("orisun_append retry, raw, of an event stored escaped: %+v, want %+v", res, second)
		}
		// Enqueued (raw), then appended by the Go append with the escapes
		// before the mover runs: the mover finds the id stored with the
		// same content, drops the staged copy, sets nothing aside.
		c := "0190a7e0-0000-7000-8000-00000000000c"
		if n := enqueueTx(ev(c, raw, mdRaw)); n != 1 {
			t.Fatalf("enqueue staged %d, want 1", n)
		}
		if n := enqueueTx(ev(c, escaped, mdEsc)); n != 0 {
			t.Fatalf("enqueue retry (escaped) of a staged event staged %d, want 0", n)
		}
		third := goAppend(ev(c, escaped, mdEsc))
		l, err := f.store.AcquireLease(ctx, "orders", "mover", nil, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r, err := f.store.MoveStaged(ctx, l, 100)
		if err != nil {
			t.Fatal(err)
		}
		if r.Moved != 0 || r.Duplicates != 1 || r.SetAside != 0 {
			t.Fatalf("move: %+v, want the staged event dropped as a duplicate of %+v, nothing set aside", r, third)
		}
		// What package outbox sends is stored as the Go append stores the
		// client's event: the characters as they are, not escaped.
		d := "0190a7e0-0000-7000-8000-00000000000d"
		appendTx(ev(d, raw, mdRaw))
		e := "0190a7e0-0000-7000-8000-00000000000e"
		enqueueTx(ev(e, raw, mdRaw))
		if r, err := f.store.MoveStaged(ctx, l, 100); err != nil || r.Moved != 1 {
			t.Fatalf("move: %+v, %v, want the one event moved", r, err)
		}
		got := texts(t, f, `SELECT data::text || ' ' || metadata::text FROM orisun_events
			WHERE id IN ('`+a+`', '`+d+`', '`+e+`') ORDER BY position`)
		if want := raw + " " + mdRaw; len(got) != 3 || got[0] != want || got[1] != want || got[2] != want {
			t.Fatalf("stored data and metadata %q, want %q for the Go append's event and outbox's alike", got, want)
		}
		if got := logOf(t, f); len(got) != 5 {
			t.Fatalf("the log holds %d events %v, want 5: each event once", len(got), got)
		}
		if got := staged(t, f); len(got) != 0 {
			t.Fatalf("staged after the move: %v", got)
		}
		if got := texts(t, f, `SELECT reason FROM orisun_set_aside`); len(got) != 0 {
			t.Fatalf("set aside: %v", got)
		}
	})
}
