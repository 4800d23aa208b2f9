package history_test

import (
	"math"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/history"
)

// TestRingKeepsFifteenMinutesWithHoles: a ring keeps the last 900 seconds,
// returns those after a given second in order, a second with no sample
// is a hole (nil), not a shift, and a figure not known is nil too.
func TestRingKeepsFifteenMinutesWithHoles(t *testing.T) {
	var r history.Ring
	if s := r.After(0); len(s.Appended) != 0 {
		t.Fatalf("empty ring: %+v", s)
	}
	const t0 = 1_800_000_000
	for s := int64(t0); s < t0+1000; s++ {
		if s == t0+990 {
			continue // a missed tick
		}
		v := history.Sample{Appended: uint32(s - t0), Published: history.Unknown, LagEvents: uint64(s - t0), LagSeconds: 1.5}
		if s == t0+995 {
			v.LagSeconds = float32(math.NaN())
		}
		r.Put(s, v)
	}
	r.Put(t0+500, history.Sample{Appended: 7}) // older than the last: ignored
	all := r.After(0)
	if all.Start != t0+100 || all.End != t0+999 || len(all.Appended) != history.Len {
		t.Fatalf("all: start %d end %d, %d samples; want %d–%d, %d", all.Start-t0, all.End-t0, len(all.Appended), 100, 999, history.Len)
	}
	for i, v := range all.Appended {
		s := all.Start + int64(i) - t0
		switch {
		case s == 990:
			if v != nil || all.LagEvents[i] != nil {
				t.Fatalf("second 990 was missed, got %v", *v)
			}
		case v == nil || int64(*v) != s || all.LagEvents[i] == nil || int64(*all.LagEvents[i]) != s:
			t.Fatalf("second %d: appended %v lag %v", s, v, all.LagEvents[i])
		case all.Published[i] != nil:
			t.Fatalf("second %d: published %d, want unknown", s, *all.Published[i])
		case (s == 995) != (all.LagSeconds[i] == nil):
			t.Fatalf("second %d: lag seconds %v", s, all.LagSeconds[i])
		}
	}
	tail := r.After(t0 + 997)
	if tail.Start != t0+998 || len(tail.Appended) != 2 || *tail.Appended[1] != 999 {
		t.Fatalf("after 997: %+v", tail)
	}
	if none := r.After(t0 + 999); len(none.Appended) != 0 || none.End != t0+999 {
		t.Fatalf("after the last: %+v", none)
	}
}

// TestCounterRate: the events since the last sample, whatever the time
// between (a missed tick is a hole, the next sample holds its events, and
// the series' sum stays exact); unknown first and when the position goes
// back.
func TestCounterRate(t *testing.T) {
	var c history.Counter
	if r := c.Rate(10); r != history.Unknown {
		t.Fatalf("first: %d", r)
	}
	if r := c.Rate(15); r != 5 {
		t.Fatalf("5 more: %d", r)
	}
	if r := c.Rate(35); r != 20 {
		t.Fatalf("20 more: %d", r)
	}
	if r := c.Rate(3); r != history.Unknown {
		t.Fatalf("went back: %d", r)
	}
	c.Reset()
	if r := c.Rate(4); r != history.Unknown {
		t.Fatalf("after reset: %d", r)
	}
}

// TestPendingAge: the age of the oldest unpublished position is from when
// the node first knew of it; caught up it is 0; a head that goes back
// starts again; more marks than the ring holds keep the oldest time.
func TestPendingAge(t *testing.T) {
	var p history.Pending
	t0 := time.Unix(1_800_000_000, 0)
	p.Seen(10, t0)
	if a := p.Age(10, t0.Add(3*time.Second)); a != 0 {
		t.Fatalf("caught up: %v", a)
	}
	p.Seen(12, t0.Add(4*time.Second))
	p.Seen(12, t0.Add(5*time.Second))
	p.Seen(20, t0.Add(6*time.Second))
	if a := p.Age(10, t0.Add(9*time.Second)); a != 5 {
		t.Fatalf("11 known since 4 s, at 9 s: %v", a)
	}
	if a := p.Age(12, t0.Add(9*time.Second)); a != 3 {
		t.Fatalf("13 known since 6 s, at 9 s: %v", a)
	}
	p.Seen(5, t0.Add(10*time.Second)) // an epoch change
	if a := p.Age(0, t0.Add(12*time.Second)); a != 2 {
		t.Fatalf("after the head went back: %v", a)
	}
	var q history.Pending
	for i := range 2 * history.Len {
		q.Seen(uint64(i+1), t0.Add(time.Duration(i)*time.Second))
	}
	if a := q.Age(0, t0.Add(2*history.Len*time.Second)); a != 2*history.Len {
		t.Fatalf("oldest kept: %v", a)
	}
	if a := q.Age(history.Len, t0.Add(2*history.Len*time.Second)); a > 2*history.Len || a < history.Len {
		t.Fatalf("merged marks: %v", a)
	}
}
