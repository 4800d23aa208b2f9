package postgres

import (
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// The append statement's values in one buffer of the right size (issue
// 22). pgx encodes a statement's values into one buffer, which it starts
// again small (256 bytes) for every statement and which grows by append as
// each value is added: past a few hundred bytes, Go's append grows a slice
// by a quarter at a time, so the values of a group of 1 KB events were
// copied about five times over on their way into the statement, and that
// garbage was a fifth of all the node's allocations under the api
// workload (docs/performance.md, "The append path's garbage"). The first
// of the event columns goes as a presized value: pgx encodes what it
// wraps, into the buffer grown first by room for all the columns. It is an
// encode plan wrapper (pgtype.Map.TryWrapEncodePlanFuncs), so it works in
// every query mode a URL can choose, the text ones included; the bytes
// sent are the same as without it.

// presized is a bind value that pgx encodes as v, into its buffer grown
// by n bytes first.
type presized[T any] struct {
	v T
	n int
}

func (p presized[T]) presized() (any, int) { return p.v, p.n }

// presizer is every presized[T].
type presizer interface{ presized() (any, int) }

// textBytes is a text[] value of byte slices: the events' data as the
// append holds them, where a []string was a copy of every event's data.
// pgx encodes a [][]byte as bytea[] where it has no parameter type to go
// by (the query modes exec and simple_protocol); a textBytes is text[]
// there too.
type textBytes [][]byte

// Dimensions, Index and IndexType make textBytes a pgtype.ArrayGetter,
// which pgx encodes as an array directly, where a [][]byte went through
// its reflection-based slice wrapper.
func (a textBytes) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a textBytes) Index(i int) any { return a[i] }

func (a textBytes) IndexType() any { return []byte(nil) }

// registerTypes makes m encode presized values and textBytes. It is every
// pool connection's AfterConnect.
func registerTypes(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapPresized}, m.TryWrapEncodePlanFuncs...)
	m.RegisterDefaultPgType(textBytes(nil), "_text")
}

// tryWrapPresized is the encode plan wrapper of presized values.
func tryWrapPresized(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	p, ok := value.(presizer)
	if !ok {
		return nil, nil, false
	}
	v, _ := p.presized()
	return &presizedPlan{}, v, true
}

// presizedPlan grows the buffer, then encodes the wrapped value with the
// plan pgx chose for it.
type presizedPlan struct{ next pgtype.EncodePlan }

func (p *presizedPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *presizedPlan) Encode(value any, buf []byte) ([]byte, error) {
	v, n := value.(presizer).presized()
	return p.next.Encode(v, slices.Grow(buf, n))
}
