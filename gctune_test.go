package orisun_test

import (
	"context"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/bench"
	"github.com/orisun-io/orisun/internal/gctune"
)

// TestNodeTunesTheCollector: a node with embedded NATS registers its
// streams with the collector tuner while it runs and removes them when it
// stops, also when its start fails after NATS started; WithoutGCTuning
// leaves the tuner off (docs/performance.md, "How much memory a node
// needs").
func TestNodeTunesTheCollector(t *testing.T) {
	if n := gctune.Sources(); n != 0 {
		t.Fatalf("%d sources before any node", n)
	}
	n := setup(t, "", nil)
	if got := gctune.Sources(); got != 1 {
		t.Errorf("%d sources with a node running, want 1", got)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := gctune.Sources(); got != 0 {
		t.Errorf("%d sources after the node stopped, want 0", got)
	}
	off := setup(t, "", nil, orisun.WithoutGCTuning())
	if got := gctune.Sources(); got != 0 {
		t.Errorf("%d sources with WithoutGCTuning, want 0", got)
	}
	if err := off.Stop(); err != nil {
		t.Fatal(err)
	}
	// A start that fails after NATS started (a boundary whose stream does
	// not fit the memory budget) leaves nothing registered.
	bad, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, HTTPAddr: "off",
		NATSMaxMemory: 12 << 20, EventStreamMaxBytes: 8 << 20, Boundaries: []string{"one", "two"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "ORISUN_NATS_MAX_MEMORY") {
		bad.Stop()
		t.Fatalf("start with a boundary beyond the budget: %v, want the budget's refusal", err)
	}
	if got := gctune.Sources(); got != 0 {
		t.Errorf("%d sources after a failed start, want 0", got)
	}
}

// BenchmarkStreamMemory measures what internal/gctune buys and costs: a
// node on SQLite fills one memory stream with 150,000 events of 1 KB
// (about 225 MB of stream, as JetStream counts it), with the tuner ("tuned") and without it
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
				if r := bench.ResidentBytes(); r > peak.Load() {
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
