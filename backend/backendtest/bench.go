package backendtest

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// BenchAppend runs the append matrix of a backend, each case against a
// new store: single-event appends from 1, 16, 64 and 256 concurrent callers
// to one boundary, without a condition and with one (each caller appends to
// its own entity under "nothing new about my entity since my last append",
// the shape of a decision, so every condition holds and is checked), and
// 100-event batches from one caller; all of it with group commit on and
// off. open returns a new store; grouped false must turn group commit off
// (one request per transaction). b.N is events in every case, reported as
// events/s. Reporting only: nothing here asserts on time.
func BenchAppend(b *testing.B, open func(b *testing.B, grouped bool) backend.Store) {
	for _, grouped := range []bool{true, false} {
		group := "group=on"
		if !grouped {
			group = "group=off"
		}
		for _, cond := range []bool{false, true} {
			for _, callers := range []int{1, 16, 64, 256} {
				name := group + "/single/cond=" + strconv.FormatBool(cond) + "/callers=" + strconv.Itoa(callers)
				b.Run(name, func(b *testing.B) {
					s := open(b, grouped)
					benchBoundary(b, s)
					var next atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					for c := range callers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							entity := "entity:" + strconv.Itoa(c)
							var last uint64
							for next.Add(1) <= int64(b.N) {
								var cd *event.Condition
								if cond {
									cd = &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{entity}}}}, After: last}
								}
								res, err := s.Append(context.Background(), "bench", benchInputs(b, 1, entity), cd)
								if err != nil {
									b.Error(err)
									return
								}
								last = res.Last
							}
						}()
					}
					wg.Wait()
					b.StopTimer()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				})
			}
		}
		b.Run(group+"/batch100", func(b *testing.B) {
			s := open(b, grouped)
			benchBoundary(b, s)
			b.ResetTimer()
			for i := 0; i < b.N; i += 100 {
				if _, err := s.Append(context.Background(), "bench", benchInputs(b, min(100, b.N-i), "entity:batch"), nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func benchBoundary(b *testing.B, s backend.Store) {
	if _, _, err := s.CreateBoundary(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
}

// benchPayload is about 100 bytes of event data.
var benchPayload = json.RawMessage(`{"customer":"c-000042","amount":1234,"currency":"EUR","note":"benchmark payload of about 100 b"}`)

// benchInputs returns n prepared events tagged tag, with fresh ids.
func benchInputs(b *testing.B, n int, tag string) []event.Input {
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{ID: event.NewID(), Type: "bench.event", Data: benchPayload, Tags: []string{tag}}
	}
	out, err := event.Prepare("bench", in, event.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	return out
}
