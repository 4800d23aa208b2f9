package orisun_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// rawRequest sends body to subject as any NATS client would and returns
// the error code of the reply ("" for a success).
func rawRequest(t testing.TB, nc *nats.Conn, subject, body string) string {
	t.Helper()
	m, err := nc.Request(subject, []byte(body), 10*time.Second)
	if err != nil {
		t.Errorf("request %s: %v", subject, err)
		return "no reply"
	}
	if e, ok := api.DecodeError(m.Header.Get(api.ErrorCodeHeader), m.Header.Get(api.ErrorHeader), m.Data); ok {
		return e.Code
	}
	return ""
}

// TestMetricsCountWhatWasSent_I7: /metrics is read while a burst of
// appends and reads runs, through the NATS API over TCP and in process:
// successes, conditions that fail (conflict), bodies the API refuses
// before the node sees them and events the node refuses (invalid), a
// boundary that does not exist (not_found, counted under _other, never a
// series of its own), reads and refused reads. Every counter read during
// the burst only grows and never passes what was sent; once it ends each
// counter equals what the test sent, and the published counter reaches the
// events appended (I7: the counters are measured, never assumed).
func TestMetricsCountWhatWasSent_I7(t *testing.T) {
	t.Parallel()
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.Boundaries = []string{"default", "second"}
	})
	ctx := context.Background()
	c := natstest.Client(t, n.NATSURL())
	nc := natstest.Connect(t, n.NATSURL())
	// One event first, so that every condition "nothing after 0" fails.
	if _, err := c.Append(ctx, "default", events(1, "seed", 64), nil); err != nil {
		t.Fatal(err)
	}

	const (
		okAPI        = 200 // single-event appends through the API
		okLocal      = 50  // 3-event appends in process, to "second"
		conflicts    = 30  // through the API, a condition that fails
		refusedAPI   = 20  // bodies the API refuses (invalid, 0 events)
		refusedNode  = 10  // 1 event each with a bad type: the node refuses
		notFound     = 10  // appends to a boundary that does not exist
		readsOK      = 25
		readsRefused = 5
	)
	jobs := make(chan func() error)
	var wg sync.WaitGroup
	var unexpected atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				if err := job(); err != nil {
					unexpected.Add(1)
					t.Error(err)
				}
			}
		}()
	}
	expectCode := func(what, got, want string) error {
		if got != want {
			return fmt.Errorf("%s: code %q, want %q", what, got, want)
		}
		return nil
	}

	// Scrape all along, and check that no counter goes back or passes
	// what the burst sends.
	final := map[[2]string]float64{
		{"orisun_append_requests_total", `boundary="default",result="ok"`}:          1 + okAPI,
		{"orisun_append_requests_total", `boundary="default",result="conflict"`}:    conflicts,
		{"orisun_append_requests_total", `boundary="default",result="invalid"`}:     refusedAPI + refusedNode,
		{"orisun_append_requests_total", `boundary="second",result="ok"`}:           okLocal,
		{"orisun_append_requests_total", `boundary="_other",result="not_found"`}:    notFound,
		{"orisun_append_events_total", `boundary="default",result="ok"`}:            1 + okAPI,
		{"orisun_append_events_total", `boundary="default",result="conflict"`}:      conflicts,
		{"orisun_append_events_total", `boundary="default",result="invalid"`}:       refusedNode,
		{"orisun_append_events_total", `boundary="second",result="ok"`}:             3 * okLocal,
		{"orisun_append_events_total", `boundary="_other",result="not_found"`}:      notFound,
		{"orisun_append_requests_total", `boundary="default",result="unavailable"`}: 0,
		{"orisun_append_requests_total", `boundary="default",result="internal"`}:    0,
		{"orisun_read_requests_total", `boundary="default",result="ok"`}:            readsOK,
		{"orisun_read_requests_total", `boundary="default",result="invalid"`}:       readsRefused,
		{"orisun_append_duration_seconds_count", ""}:                                1 + okAPI + conflicts + refusedNode + okLocal + notFound,
		{"orisun_read_duration_seconds_count", ""}:                                  readsOK,
		{"orisun_store_errors_total", `op="append"`}:                                0,
	}
	scrapeDone := make(chan struct{})
	stopScrape := make(chan struct{})
	scrapes := 0
	go func() {
		defer close(scrapeDone)
		last := map[[2]string]float64{}
		for {
			select {
			case <-stopScrape:
				return
			default:
			}
			_, body := httpGet(t, n, "/metrics")
			scrapes++
			for k, want := range final {
				v, _ := metric(body, k[0], k[1])
				if v < last[k] || v > want {
					t.Errorf("during the burst %s{%s} = %v (before: %v, at the end it must be %v)", k[0], k[1], v, last[k], want)
				}
				last[k] = v
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var sends []func() error
	for i := range okAPI {
		sends = append(sends, func() error {
			_, err := c.Append(ctx, "default", events(1, "burst.ok", 256), nil)
			if err != nil {
				return fmt.Errorf("append %d: %w", i, err)
			}
			return nil
		})
	}
	for i := range okLocal {
		sends = append(sends, func() error {
			_, err := n.Append(ctx, "second", events(3, "burst.local", 256), nil)
			if err != nil {
				return fmt.Errorf("local append %d: %w", i, err)
			}
			return nil
		})
	}
	for range conflicts {
		sends = append(sends, func() error {
			_, err := c.Append(ctx, "default", events(1, "burst.conflict", 64), &event.Condition{After: 0})
			return expectCode("conditional append", api.CodeOf(err), api.CodeConflict)
		})
	}
	for range refusedAPI {
		sends = append(sends, func() error {
			return expectCode("a body that is no request", rawRequest(t, nc, api.AppendSubject("default"), `{"events": 5}`), api.CodeInvalid)
		})
	}
	for range refusedNode {
		sends = append(sends, func() error {
			return expectCode("a bad type", rawRequest(t, nc, api.AppendSubject("default"),
				`{"events":[{"type":"no spaces allowed","data":{}}]}`), api.CodeInvalid)
		})
	}
	for range notFound {
		sends = append(sends, func() error {
			return expectCode("no such boundary", rawRequest(t, nc, api.AppendSubject("nosuch"),
				`{"events":[{"type":"x","data":{}}]}`), api.CodeNotFound)
		})
	}
	for range readsOK {
		sends = append(sends, func() error {
			_, err := c.Read(ctx, "default", 0, 10, nil)
			return err
		})
	}
	for range readsRefused {
		sends = append(sends, func() error {
			return expectCode("limit 0", rawRequest(t, nc, api.ReadSubject("default"), `{"limit":0}`), api.CodeInvalid)
		})
	}
	// Interleave the kinds: a fixed shuffle of the jobs.
	for i := range sends {
		j := (i * 7919) % len(sends)
		sends[i], sends[j] = sends[j], sends[i]
	}
	for _, s := range sends {
		jobs <- s
	}
	close(jobs)
	wg.Wait()
	close(stopScrape)
	<-scrapeDone
	if unexpected.Load() > 0 {
		t.Fatalf("%d requests did not end as sent", unexpected.Load())
	}
	t.Logf("%d scrapes during the burst of %d requests", scrapes, len(sends))

	_, body := httpGet(t, n, "/metrics")
	for k, want := range final {
		wantMetric(t, body, k[0], k[1], want)
	}
	if _, ok := metric(body, "orisun_append_requests_total", `boundary="nosuch",result="not_found"`); ok {
		t.Fatal("a boundary that does not exist got series of its own")
	}
	wantMetric(t, body, "orisun_lease_changes_total", `boundary="default",change="acquired"`, 1)
	wantMetric(t, body, "orisun_lease_changes_total", `boundary="default",change="lost"`, 0)
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 0)

	// Every appended event is published and counted once.
	waitSettled(t, n, 30*time.Second)
	testutil.Eventually(t, "the published counters reach the heads", 10*time.Second, 20*time.Millisecond, func() bool {
		_, body := httpGet(t, n, "/metrics")
		d, _ := metric(body, "orisun_published_events_total", `boundary="default"`)
		s, _ := metric(body, "orisun_published_events_total", `boundary="second"`)
		b, _ := metric(body, "orisun_publish_batch_duration_seconds_count", "")
		return d == 1+okAPI && s == 3*okLocal && b > 0
	})
}

// TestMetricsCountFastBatches: orisun_published_fast_batch_events_total
// counts the events published in fast-ingest batches, a part of
// orisun_published_events_total. One append of 100 events is one page of
// 100, published as one batch (the embedded server takes batches); an
// append of 5 after it is published as single publishes and counts only in
// the total.
func TestMetricsCountFastBatches(t *testing.T) {
	t.Parallel()
	n := setup(t, "", withHTTP)
	ctx := context.Background()
	appendSettled(t, ctx, n, events(100, "page", 64), 30*time.Second)
	_, body := httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_published_events_total", `boundary="default"`, 100)
	wantMetric(t, body, "orisun_published_fast_batch_events_total", `boundary="default"`, 100)
	appendSettled(t, ctx, n, events(5, "few", 64), 30*time.Second)
	_, body = httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_published_events_total", `boundary="default"`, 105)
	wantMetric(t, body, "orisun_published_fast_batch_events_total", `boundary="default"`, 100)
}

// TestMetricsBoundaryCap: with ORISUN_METRICS_BOUNDARIES=2 the first two
// boundaries the node runs have series of their own and every other one is
// summed under boundary="_other", counters and the status's gauges alike;
// with -1 no boundary has series of its own. The histograms carry no
// boundary label either way.
func TestMetricsBoundaryCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cap  int
		own  []string
		rest []string
	}{
		{2, []string{"a", "b"}, []string{"c", "d"}},
		{-1, nil, []string{"a", "b", "c", "d"}},
	} {
		t.Run(fmt.Sprint(tc.cap), func(t *testing.T) {
			t.Parallel()
			n := setup(t, "", func(c *orisun.Config) {
				withHTTP(c)
				c.Boundaries = []string{"a", "b", "c", "d"}
				c.MetricsBoundaries = tc.cap
			})
			for _, b := range []string{"a", "b", "c", "d"} {
				if _, err := n.Append(context.Background(), b, events(2, "x", 32), nil); err != nil {
					t.Fatal(err)
				}
			}
			waitSettled(t, n, 30*time.Second)
			_, body := httpGet(t, n, "/metrics")
			for _, b := range tc.own {
				wantMetric(t, body, "orisun_append_requests_total", `boundary="`+b+`",result="ok"`, 1)
				wantMetric(t, body, "orisun_boundary_head_position", `boundary="`+b+`"`, 2)
				wantMetric(t, body, "orisun_publisher_state", `boundary="`+b+`",state="leading"`, 1)
			}
			for _, b := range tc.rest {
				if strings.Contains(body, `boundary="`+b+`"`) {
					t.Fatalf("boundary %s beyond the cap has series of its own:\n%s", b, grepLines(body, "orisun_"))
				}
			}
			k := float64(len(tc.rest))
			wantMetric(t, body, "orisun_append_requests_total", `boundary="_other",result="ok"`, k)
			wantMetric(t, body, "orisun_append_events_total", `boundary="_other",result="ok"`, 2*k)
			// Pages of 2 go as single publishes: the series is there, at 0.
			wantMetric(t, body, "orisun_published_fast_batch_events_total", `boundary="_other"`, 0)
			wantMetric(t, body, "orisun_publisher_state", `boundary="_other",state="leading"`, k)
			wantMetric(t, body, "orisun_boundary_lag_events", `boundary="_other"`, 0)
			wantMetric(t, body, "orisun_lease_held", `boundary="_other"`, k)
			if _, ok := metric(body, "orisun_boundary_head_position", `boundary="_other"`); ok {
				t.Fatal("heads of different boundaries summed")
			}
			testutil.Eventually(t, "published counted under _other", 10*time.Second, 20*time.Millisecond, func() bool {
				_, body := httpGet(t, n, "/metrics")
				v, _ := metric(body, "orisun_published_events_total", `boundary="_other"`)
				return v == 2*k
			})
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, "orisun_append_duration_seconds") && strings.Contains(line, "boundary=") {
					t.Fatalf("a histogram with a boundary label: %s", line)
				}
			}
		})
	}
}

// TestMetricsCountEventsFoundInTheStream: on a NATS of its own beside the
// node, a node publishes 10 events whose checkpoint writes all fail, and
// stops. The node that leads next finds them in the stream after the
// checkpoint: it publishes none of them again, counts them in
// orisun_published_events_total (they were counted nowhere, and the
// counter would stay below the stream for good).
func TestMetricsCountEventsFoundInTheStream(t *testing.T) {
	t.Parallel()
	ns := smallNATS(t, 64<<20)
	dir := t.TempDir()
	cfg := func(c *orisun.Config) {
		withHTTP(c)
		c.NATSURL = ns.ClientURL()
		c.EventStreamMaxBytes = 1 << 20
	}
	fs := &failingSave{}
	fs.all.Store(true)
	a := setup(t, dir, cfg, testhooks.Option[orisun.Option](testhooks.Hooks{
		WrapStore: func(s backend.Store) backend.Store { fs.Store = s; return fs },
	}))
	ctx := context.Background()
	mustAppend(t, ctx, a, "default", events(10, "found", 32))
	js := jsOf(t, a)
	testutil.Eventually(t, "the 10 events in the stream", 30*time.Second, 20*time.Millisecond, func() bool {
		s, err := js.Stream(ctx, stream.Name("default"))
		return err == nil && s.CachedInfo().State.LastSeq == 10
	})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	b := setup(t, dir, cfg)
	st := waitSettled(t, b, 30*time.Second)
	if d := boundaryOf(t, st, "default"); d.Head != 10 || d.Published != 10 {
		t.Fatalf("the next leader: head %d, published %d, want 10 and 10", d.Head, d.Published)
	}
	if first, last := checkStream(t, b, "default"); first != 1 || last != 10 {
		t.Fatalf("the stream holds %d..%d, want 1..10 (nothing published again)", first, last)
	}
	_, body := httpGet(t, b, "/metrics")
	wantMetric(t, body, "orisun_published_events_total", `boundary="default"`, 10)
}
