package orisun_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// The benchmarks of this file run on each backend: SQLite always,
// PostgreSQL when ORISUN_TEST_PG_URL is set (scripts/test sets it):
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench 'BenchmarkBackend' -benchtime 20000x .
//
// They report; they assert nothing about time.

func benchBackends(b *testing.B, run func(b *testing.B, mutate func(*orisun.Config))) {
	b.Run("sqlite", func(b *testing.B) { run(b, nil) })
	if os.Getenv(pgtest.EnvURL) == "" {
		b.Log("ORISUN_TEST_PG_URL not set: PostgreSQL benchmarks not run (use scripts/test)")
		return
	}
	b.Run("postgres", func(b *testing.B) {
		url := pgtest.URL(b)
		run(b, func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url })
	})
}

// BenchmarkBackendAppend: single-event appends from 1, 16 and 64 concurrent
// callers, and 100-event batches, through the node (validation, group
// commit, wake-ups). events/s is the figure to read.
func BenchmarkBackendAppend(b *testing.B) {
	benchBackends(b, func(b *testing.B, mutate func(*orisun.Config)) {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("single/callers=%d", callers), func(b *testing.B) {
				n := setup(b, "", mutate)
				ev := events(1, "bench.single", 128)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if _, err := n.Append(context.Background(), "default", ev, nil); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			})
		}
		b.Run("batch=100", func(b *testing.B) {
			n := setup(b, "", mutate)
			batch := events(100, "bench.batch", 128)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += 100 {
				if _, err := n.Append(context.Background(), "default", batch[:min(100, b.N-i)], nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	})
}

// BenchmarkBackendRelay: 1 KB events appended in batches of 1,000 while the
// publisher runs; the time until every event is acknowledged by JetStream
// and checkpointed.
func BenchmarkBackendRelay(b *testing.B) {
	benchBackends(b, func(b *testing.B, mutate func(*orisun.Config)) {
		n := setup(b, "", mutate)
		batch := events(1000, "bench.relay", 1024)
		b.SetBytes(1024)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i += 1000 {
			if _, err := n.Append(context.Background(), "default", batch[:min(1000, b.N-i)], nil); err != nil {
				b.Fatal(err)
			}
		}
		waitSettled(b, n, 10*time.Minute)
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
}

// BenchmarkBackendLatency: single-event appends at a fixed rate of 5,000
// events/s (paced in 1 ms ticks, from 16 callers); a live subscriber
// records the time from the start of each Append call to its delivery.
// Reports p50, p99 and the rate reached.
func BenchmarkBackendLatency(b *testing.B) {
	benchBackends(b, func(b *testing.B, mutate func(*orisun.Config)) {
		const rate = 5000
		n := setup(b, "", mutate)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var sent sync.Map // event id → time its Append began
		lat := make([]time.Duration, 0, b.N)
		got := make(chan struct{})
		live := make(chan struct{})
		var liveOnce sync.Once
		go n.Subscribe(ctx, "default", 0, func(_ context.Context, e orisun.Event) error {
			if t0, ok := sent.Load(e.ID); ok {
				lat = append(lat, time.Since(t0.(time.Time)))
			}
			if int(e.Position) == b.N {
				close(got)
			}
			return nil
		}, orisun.SubscribeOptions{OnCaughtUp: func(uint64) { liveOnce.Do(func() { close(live) }) }})
		<-live
		work := make(chan int64, rate)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ev := events(1, "bench.latency", 128)
				for range work {
					ev[0].ID = event.NewID()
					sent.Store(ev[0].ID, time.Now())
					if _, err := n.Append(ctx, "default", ev, nil); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		b.ResetTimer()
		start := time.Now()
		tick := time.NewTicker(time.Millisecond)
		perTick := rate / 1000
		for i := 0; i < b.N; {
			<-tick.C
			for j := 0; j < perTick && i < b.N; j++ {
				work <- 0
				i++
			}
		}
		tick.Stop()
		close(work)
		wg.Wait()
		<-got
		elapsed := time.Since(start)
		b.StopTimer()
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no latency measured")
		}
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(len(lat))/float64(b.N)*100, "measured-%")
	})
}

// BenchmarkAPIPermissions: what the always-on permission model costs on the
// application's path (docs/design.md §12). 1 KB single-event appends
// through the NATS API (client.Append over loopback TCP without
// credentials, so as the application principal) from 64 goroutines, with a
// client.Subscribe that delivers every appended event before the clock
// stops; "on" is the default, "off" the negative control's seam
// (testhooks.Hooks.PermissionsOff: no authenticator, no permissions). The
// two alternate in one run, four rounds in the order on off, off on, on
// off, off on, so that the machine's load drifts over both alike and
// neither always runs second, after the other's node was removed (-count
// would run one four times, then the other):
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench BenchmarkAPIPermissions -benchtime 40000x .
//
// SQLite only: the permission checks are the server's, whatever the store.
func BenchmarkAPIPermissions(b *testing.B) {
	onOffRounds(b, func(b *testing.B, on bool) {
		var opts []orisun.Option
		if !on {
			opts = append(opts, testhooks.Option[orisun.Option](testhooks.Hooks{PermissionsOff: true}))
		}
		n := setup(b, "", nil, opts...)
		c := natstest.Client(b, n.NATSURL())
		var delivered atomic.Int64
		live := newLiveSignal()
		ctx, cancel := context.WithCancel(context.Background())
		subDone := make(chan error, 1)
		go func() {
			subDone <- c.Subscribe(ctx, "default", 0, func(context.Context, event.Event) error {
				delivered.Add(1)
				return nil
			}, client.SubscribeOptions{OnCaughtUp: live.caughtUp})
		}()
		defer func() {
			cancel()
			<-subDone
		}()
		live.wait(b, "the subscription", subDone)
		start, cpu0 := appendFrom64(b, c)
		for deadline := time.Now().Add(5 * time.Minute); delivered.Load() < int64(b.N); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the subscription delivered %d of %d", delivered.Load(), b.N)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		// The process's CPU time (server, store, client and
		// subscription all run in it) per append: what the checks
		// cost, less disturbed than the wall clock by other work on
		// the machine.
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// onOffRounds runs body as sub-benchmarks in four rounds of on and off,
// alternating which comes first (on off, off on, …), so that the machine's
// drift over the run falls on both alike.
func onOffRounds(b *testing.B, body func(b *testing.B, on bool)) {
	for r := 1; r <= 4; r++ {
		order := []bool{true, false}
		if r%2 == 0 {
			order = []bool{false, true}
		}
		for _, on := range order {
			name := fmt.Sprintf("round=%d/off", r)
			if on {
				name = fmt.Sprintf("round=%d/on", r)
			}
			b.Run(name, func(b *testing.B) { body(b, on) })
		}
	}
}

// appendFrom64 resets the timer and appends one 1 KB event b.N times
// through c from 64 goroutines; it returns when they are done, with when
// they started and the process's CPU time then.
func appendFrom64(b *testing.B, c *client.Client) (start time.Time, cpu0 time.Duration) {
	ev := events(1, "bench.api", 1024)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu0 = time.Now(), processCPU()
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Append(context.Background(), "default", ev, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return start, cpu0
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAPIMetrics: what the counters, histograms and store watch cost
// on the users' path: single-event appends of 1 KB from 64 concurrent
// callers through the NATS API over TCP (package client), on SQLite
// without fsync (synchronous OFF).
// "on" is the node as it runs; "off" the same node with its
// instrumentation switched off (testhooks.Hooks.InstrumentationOff). They
// alternate in one run, as in BenchmarkAPIPermissions, four rounds each:
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench BenchmarkAPIMetrics -benchtime 40000x .
//
// events/s and cpu-ns/op (the process's CPU time per append: server,
// store and client all run in it) are the figures to compare.
func BenchmarkAPIMetrics(b *testing.B) {
	onOffRounds(b, func(b *testing.B, on bool) {
		var opts []orisun.Option
		if !on {
			opts = append(opts, testhooks.Option[orisun.Option](testhooks.Hooks{InstrumentationOff: true}))
		}
		// Without fsync: the disk is shared with whatever else the
		// machine runs, and its waits would decide the figure.
		n := setup(b, "", func(c *orisun.Config) { c.SQLiteSynchronous = "OFF" }, opts...)
		c := natstest.Client(b, n.NATSURL())
		start, cpu0 := appendFrom64(b, c)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	})
}
