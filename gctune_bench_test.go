package orisun_test

import (
	"context"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
)

// BenchmarkStreamMemory measures what internal/gctune buys and costs: a
// node on SQLite fills one memory stream with 150,000 events of 1 KB
// (about 214 MB of stream), with the tuner ("tuned") and without it
// ("gogc=100": GOGC set in the environment turns it off), and reports the
// process's peak resident set beyond the stream's bytes, the collections
// and the CPU the fill took (docs/performance.md, "How much memory a node
// needs"). One fill per iteration: run it with -benchtime 1x.
func BenchmarkStreamMemory(b *testing.B) {
	for _, mode := range []string{"tuned", "gogc=100"} {
		b.Run(mode, func(b *testing.B) {
			if mode != "tuned" {
				b.Setenv("GOGC", "100")
			}
			for range b.N {
				fillStream(b)
			}
		})
	}
}

func fillStream(b *testing.B) {
	b.StopTimer()
	n := setup(b, "", func(c *orisun.Config) {
		c.Boundaries = []string{"b"}
		c.EventStreamMaxBytes = 1 << 30
	})
	ctx := context.Background()
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if r := residentBytes(); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	cycles := s[0].Value.Uint64()
	cpu := processCPU()
	b.StartTimer()
	for range 300 {
		if _, err := n.Append(ctx, "b", events(500, "t", 1024), nil); err != nil {
			b.Fatal(err)
		}
	}
	waitSettled(b, n, 5*time.Minute)
	b.StopTimer()
	close(stop)
	<-done
	metrics.Read(s)
	st, err := jsOf(b, n).Stream(ctx, "ORISUN_b")
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(peak.Load()-int64(info.State.Bytes))/1e6, "MB-rss-beyond-stream")
	b.ReportMetric(float64(info.State.Bytes)/1e6, "MB-stream")
	b.ReportMetric(float64(s[0].Value.Uint64()-cycles), "gc-cycles")
	b.ReportMetric((processCPU() - cpu).Seconds(), "cpu-s")
	if err := n.Stop(); err != nil {
		b.Fatal(err)
	}
}

// residentBytes is the process's resident set (Linux; 0 elsewhere).
func residentBytes() int64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
