package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/orisun-io/orisun/event"
)

// benchEvents returns n prepared events of about 100 bytes of data, with
// fresh time-ordered ids.
func benchEvents(n int) []event.Input {
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{
			ID:   event.NewID(),
			Type: "bench.event",
			Data: json.RawMessage(`{"customer":"c-000042","amount":1234,"currency":"EUR","note":"benchmark payload of about 100 b"}`),
			Tags: []string{"customer:42"},
		}
	}
	return in
}

// BenchmarkAppend reports append throughput against the PostgreSQL server
// of ORISUN_TEST_PG_URL (scripts/test starts one): single-event appends from
// many goroutines to one boundary (what group commit is for), the same
// spread over 8 boundaries (groups of different boundaries commit side by
// side), and sequential 100-event batches. Reporting only: no assertion on
// time.
func BenchmarkAppend(b *testing.B) {
	b.Run("single_parallel", func(b *testing.B) {
		s := setup(b, Config{})
		create(b, s, "bench")
		groups := s.groups.Load()
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Append(context.Background(), "bench", benchEvents(1), nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		if n := s.groups.Load() - groups; n > 0 {
			b.ReportMetric(float64(b.N)/float64(n), "events/commit")
		}
	})
	b.Run("single_parallel_8_boundaries", func(b *testing.B) {
		s := setup(b, Config{})
		names := make([]string, 8)
		for i := range names {
			names[i] = "bench_" + strconv.Itoa(i)
			create(b, s, names[i])
		}
		groups := s.groups.Load()
		b.SetParallelism(16)
		b.ResetTimer()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			// Spread the goroutines over the boundaries.
			boundary := names[int(next.Add(1))%len(names)]
			for pb.Next() {
				if _, err := s.Append(context.Background(), boundary, benchEvents(1), nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		if n := s.groups.Load() - groups; n > 0 {
			b.ReportMetric(float64(b.N)/float64(n), "events/commit")
		}
	})
	b.Run("batch100", func(b *testing.B) {
		s := setup(b, Config{})
		create(b, s, "bench")
		b.ResetTimer()
		for range b.N {
			if _, err := s.Append(context.Background(), "bench", benchEvents(100), nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
