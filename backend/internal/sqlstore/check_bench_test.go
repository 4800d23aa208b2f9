package sqlstore_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// BenchmarkCheckPage reports what the read checks cost alone: the JSON
// check of one event of about 1 KB of data and 60 bytes of metadata by
// json.Valid and by ValidJSON, and CheckPage of a page of 1,000 such
// events with and without the JSON check (SQLite checks it, PostgreSQL's
// json columns do not need it; b.N is events). Reporting only.
func BenchmarkCheckPage(b *testing.B) {
	data := []byte(`{"customer":"c-000042","note":"` + strings.Repeat("x", 1000) + `"}`)
	md := []byte(`{"correlation":"0190f1e2-7b4c-7a8e-9c1d-2f3e4a5b6c7d","by":"bench"}`)
	events := make([]event.Event, 1000)
	for i := range events {
		events[i] = event.Event{Boundary: "bench", Position: uint64(i + 1), Data: data, Metadata: md}
	}
	// The validators alone, on the same texts.
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"valid=json.Valid", json.Valid}, {"valid=ValidJSON", sqlstore.ValidJSON}} {
		valid := v.valid
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(data) + len(md)))
			for b.Loop() {
				if !valid(data) || !valid(md) {
					b.Fatal("not valid")
				}
			}
		})
	}
	for _, checkJSON := range []bool{true, false} {
		name := "json=off"
		if checkJSON {
			name = "json=on"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data) + len(md)))
			for i := 0; i < b.N; i += len(events) {
				if _, err := sqlstore.CheckPage("bench", 0, 1000, 1000, events, true, checkJSON); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
