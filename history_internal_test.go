package orisun

import (
	"testing"
	"time"
)

// idlePub is a publisher caught up at a position, for the sampler's
// benchmark.
type idlePub struct{ pos uint64 }

func (p idlePub) CaughtUp() (uint64, bool) { return p.pos, true }

// BenchmarkHistorySample1000: one pass of the history sampler over 1,000
// boundaries the node leads, with appends between passes: what the
// sampler costs a node each second (docs/console.md, "What it costs").
// ns/op per second is the share of one core: 1,000,000 ns/op would be
// 0.1%.
func BenchmarkHistorySample1000(b *testing.B) {
	hs := make([]boundaryHistory, 1000)
	for i := range hs {
		hs[i].noteHead("e", 100)
		hs[i].leads.Store(true)
	}
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		for j := range hs {
			h := &hs[j]
			h.raiseHead(uint64(100 + i*3))
			h.published.Store(uint64(100 + i*2))
			h.sample(now.Unix(), now, idlePub{0})
		}
	}
}
