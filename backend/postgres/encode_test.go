package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orisun-io/orisun/event"
)

// appendStatementParams is the description of the append statement's
// parameters $1…$7 as the server gives it (sqlAppendTail).
var appendStatementParams = &pgconn.StatementDescription{ParamOIDs: []uint32{
	pgtype.TextOID, pgtype.Int8OID, pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
	pgtype.TextArrayOID, pgtype.TextArrayOID,
}}

// kilobyteEvents are n prepared events of 1 KB of data, the size the api
// workload of orisun bench appends, each with a tag.
func kilobyteEvents(tb testing.TB, n int) []event.Input {
	tb.Helper()
	data, _ := json.Marshal(map[string]string{"note": string(bytes.Repeat([]byte("x"), 1010))})
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{Type: "bench.event", Data: data, Tags: []string{"customer:" + strconv.Itoa(i)}}
	}
	out, err := event.Prepare("bench", in, event.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkAppendParams measures what the append statement's values cost
// the node before they are sent: eventColumns and pgx's encoding of them,
// in the binary format the default query mode uses, for statements of 1,
// 8 and 100 events of 1 KB (issue 22, docs/performance.md). Reporting
// only.
func BenchmarkAppendParams(b *testing.B) {
	for _, n := range []int{1, 8, 100} {
		b.Run("events="+strconv.Itoa(n), func(b *testing.B) {
			m := pgtype.NewMap()
			registerTypes(m)
			events := kilobyteEvents(b, n)
			var eqb pgx.ExtendedQueryBuilder
			b.ReportAllocs()
			b.SetBytes(int64(n * len(events[0].Data)))
			for b.Loop() {
				var cols eventColumns
				cols.add(events)
				if err := eqb.Build(m, appendStatementParams, cols.args("bench")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAppendParamsSameBytes: the append statement's values encode to the
// same bytes with presized ids and textBytes data as the plain []pgtype.UUID
// (or []string, ids not canonical) and []string they stand for, in the
// binary format of the prepared modes and the text format with no
// parameter types of exec and simple_protocol; ids, data with quotes,
// backslashes and non-ASCII, metadata present and absent.
func TestAppendParamsSameBytes(t *testing.T) {
	t.Parallel()
	events := kilobyteEvents(t, 3)
	events[1].Data = json.RawMessage(`{"q":"a \"b\" \\ c ü {1,2}"}`)
	events[1].Metadata = json.RawMessage(`{"by":"x"}`)
	events[2].Data = json.RawMessage(`null`)
	textIDs := append([]event.Input(nil), events...)
	textIDs[0].ID = "NOT-A-UUID"
	for _, in := range [][]event.Input{events, textIDs} {
		var cols eventColumns
		cols.add(in)
		plain := cols.args("bench")
		if cols.textIDs != nil {
			plain[2] = cols.textIDs
		} else {
			plain[2] = cols.ids
		}
		data := make([]string, len(cols.data))
		for i, d := range cols.data {
			data[i] = string(d)
		}
		plain[5] = data
		for _, sd := range []*pgconn.StatementDescription{appendStatementParams, nil} {
			m := pgtype.NewMap()
			registerTypes(m)
			var got, want pgx.ExtendedQueryBuilder
			if err := got.Build(m, sd, cols.args("bench")); err != nil {
				t.Fatalf("text ids %v, described %v: %v", cols.textIDs != nil, sd != nil, err)
			}
			if err := want.Build(pgtype.NewMap(), sd, plain); err != nil {
				t.Fatal(err)
			}
			if len(got.ParamValues) != len(want.ParamValues) {
				t.Fatalf("%d values, want %d", len(got.ParamValues), len(want.ParamValues))
			}
			for i := range want.ParamValues {
				if !bytes.Equal(got.ParamValues[i], want.ParamValues[i]) || (got.ParamValues[i] == nil) != (want.ParamValues[i] == nil) {
					t.Errorf("text ids %v, described %v: $%d is %q, want %q", cols.textIDs != nil, sd != nil, i+1, got.ParamValues[i], want.ParamValues[i])
				}
			}
			if fmt.Sprint(got.ParamFormats) != fmt.Sprint(want.ParamFormats) {
				t.Errorf("formats %v, want %v", got.ParamFormats, want.ParamFormats)
			}
		}
	}
}
