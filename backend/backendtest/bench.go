package backendtest

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
// off. open returns a new store with g: GroupDelay for group commit on,
// groups of one request (one request per transaction) for off. b.N is
// events in every case, reported as events/s. Reporting only: nothing here
// asserts on time.
func BenchAppend(b *testing.B, open func(tb testing.TB, g Groups) backend.Store) {
	for _, grouped := range []bool{true, false} {
		group, g := "group=on", GroupDelay
		if !grouped {
			group, g = "group=off", Groups{MaxEvents: 1}
		}
		for _, cond := range []bool{false, true} {
			for _, callers := range []int{1, 16, 64, 256} {
				name := group + "/single/cond=" + strconv.FormatBool(cond) + "/callers=" + strconv.Itoa(callers)
				b.Run(name, func(b *testing.B) {
					s := open(b, g)
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
			s := open(b, g)
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

// BenchEvents returns n events of type bench.event, each with about 100
// bytes of data, tagged tag, with fresh time-ordered ids. Their data is
// compact already, so they are what event.Prepare would make of them.
func BenchEvents(n int, tag string) []event.Input {
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{ID: event.NewID(), Type: "bench.event", Data: benchPayload, Tags: []string{tag}}
	}
	return in
}

// benchInputs returns BenchEvents prepared for the boundary bench.
func benchInputs(b *testing.B, n int, tag string) []event.Input {
	out, err := event.Prepare("bench", BenchEvents(n, tag), event.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchParallel appends single events from b.RunParallel's goroutines, 16
// per GOMAXPROCS, to the boundaries of s (each goroutine to one of them,
// in turn), and reports events/s and, when groups (the group transactions
// s has begun) is given, events per group commit: what group commit is
// for. b.N is events.
func BenchParallel(b *testing.B, s backend.Store, boundaries []string, groups func() int64) {
	var before int64
	if groups != nil {
		before = groups()
	}
	b.SetParallelism(16)
	b.ResetTimer()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		boundary := boundaries[int(next.Add(1))%len(boundaries)]
		for pb.Next() {
			if _, err := s.Append(context.Background(), boundary, BenchEvents(1, "customer:42"), nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if groups != nil {
		if n := groups() - before; n > 0 {
			b.ReportMetric(float64(b.N)/float64(n), "events/commit")
		}
	}
}

// BenchRead reports the read path of s: pages of 1,000 events of about
// 1 KB of data (and 60 bytes of metadata) read without a query, what the
// publisher and a catching-up subscription read, from a boundary of 10,000
// such events, page after page round it. b.N is events, reported as
// events/s and as the CPU time the process used per event (less at the
// mercy of other processes than the wall time). Reporting only: nothing
// here asserts on time.
func BenchRead(b *testing.B, s backend.Store) {
	ctx := context.Background()
	benchBoundary(b, s)
	const total, page = 10_000, 1000
	data := json.RawMessage(`{"customer":"c-000042","note":"` + strings.Repeat("x", 1000) + `"}`)
	md := json.RawMessage(`{"correlation":"0190f1e2-7b4c-7a8e-9c1d-2f3e4a5b6c7d","by":"bench"}`)
	for i := 0; i < total; i += page {
		in := make([]event.Input, page)
		for k := range in {
			in[k] = event.Input{ID: event.NewID(), Type: "bench.event", Data: data, Metadata: md, Tags: []string{"customer:42"}}
		}
		if _, err := s.Append(ctx, "bench", in, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu := cpuTime()
	after := uint64(0)
	for read := 0; read < b.N; {
		_, events, err := s.Read(ctx, "bench", after, page, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(events) != page {
			b.Fatalf("read %d events after %d, want %d", len(events), after, page)
		}
		read += len(events)
		after = (after + page) % total
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if used := cpuTime() - cpu; used > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/event")
	}
}
