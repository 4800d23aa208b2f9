package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/metrics"
)

// TestResult: the result label is the API's error code of the error, the
// one a client is answered with.
func TestResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("append: %w", event.ErrInvalid), api.CodeInvalid},
		{fmt.Errorf("append: %w", event.ErrNotFound), api.CodeNotFound},
		{&event.ConflictError{Position: 3}, api.CodeConflict},
		{fmt.Errorf("x: %w", event.ErrTooLarge), api.CodeTooLarge},
		{fmt.Errorf("x: %w", event.ErrUnavailable), api.CodeUnavailable},
		{context.DeadlineExceeded, api.CodeUnavailable},
		{errors.New("boom"), api.CodeInternal},
		{&api.Error{Code: "a_code_not_listed"}, api.CodeInternal},
	} {
		if got := metrics.Results[metrics.Result(tc.err)]; got != tc.want {
			t.Errorf("Result(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// TestCap: the first max boundaries added get series of their own, for
// good; the others, and names never added, count under _other.
func TestCap(t *testing.T) {
	m := metrics.New(2)
	for _, b := range []string{"a", "b", "c", "a"} {
		m.Add(b).Appended(1, nil, time.Millisecond)
	}
	m.Boundary("d").Appended(2, event.ErrNotFound, -1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	for label, want := range map[string]float64{"a": 2, "b": 1, "_other": 1} {
		if got := (counter(t, reg, "orisun_append_requests_total", label, "ok")); got != want {
			t.Errorf("%s ok = %v, want %v", label, got, want)
		}
	}
	if got := (counter(t, reg, "orisun_append_events_total", "_other", "not_found")); got != 2 {
		t.Errorf("_other not_found events = %v, want 2", got)
	}
	if m.Label("c") != metrics.Other || m.Label("a") != "a" || m.Label("never") != metrics.Other {
		t.Errorf("labels: c %s, a %s, never %s", m.Label("c"), m.Label("a"), m.Label("never"))
	}
	// -1 in the configuration is 0 here: nobody has series of its own.
	if metrics.New(0).Add("a").Appended(1, nil, 0); metrics.New(0).Label("a") != metrics.Other {
		t.Error("a cap of 0 labelled a boundary")
	}
	// Off: nil counts nothing and does not panic.
	var off *metrics.Metrics
	off.Add("a").Appended(1, nil, 0)
	off.Boundary("a").Read(nil, 0)
	off.StoreError(metrics.OpAppend)
	if off.Collectors() != nil || off.Label("a") != "a" {
		t.Error("nil metrics are not off")
	}
}

// TestFoundCountsUntimed: events the publisher found in the stream count
// as published, neither as fast-batch events nor as a timed batch.
func TestFoundCountsUntimed(t *testing.T) {
	m := metrics.New(10)
	b := m.Add("a")
	b.Published(5, 2*time.Millisecond, true)
	b.Found(3)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	if got := counter(t, reg, "orisun_published_events_total", "a", ""); got != 8 {
		t.Errorf("published = %v, want 8 (5 acknowledged, 3 found)", got)
	}
	if got := counter(t, reg, "orisun_published_fast_batch_events_total", "a", ""); got != 5 {
		t.Errorf("fast-batch events = %v, want the 5 of the batch", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "orisun_publish_batch_duration_seconds" {
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 1 {
				t.Errorf("%d batches timed, want the one published", n)
			}
			return
		}
	}
	t.Fatal("no orisun_publish_batch_duration_seconds")
}

// counter is the value of one sample of a counter vector in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, boundary, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["boundary"] == boundary && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sample %s{boundary=%q,result=%q}", name, boundary, result)
	return 0
}

// BenchmarkAppended is what counting one append costs on the node's hot
// path: the lookup of the boundary's handles and the counting (two adds
// and one histogram observation), from 2 goroutines per core over 100
// boundaries:
//
//	go test -run '^$' -bench . ./internal/metrics/
func BenchmarkAppended(b *testing.B) {
	m := metrics.New(100)
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("boundary_%d", i)
		m.Add(names[i])
	}
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			start := time.Now()
			m.Boundary(names[i%len(names)]).Appended(1, nil, time.Since(start))
			i++
		}
	})
}
