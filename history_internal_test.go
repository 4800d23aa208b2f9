package orisun

import (
	"testing"
	"time"
)

// idlePub is a publisher caught up at a position, for the sampler's
// benchmark.
type idlePub struct{ pos uint64 }

func (p idlePub) CaughtUp() (uint64, bool) { return p.pos, true }

// TestHistoryNoSpikeBeforeTheHeadIsKnown: until the node's head watch has
// read the head, the sampler counts nothing (an append through this node
// before then would otherwise count the whole log as appended in one
// second); from then on it counts what is appended.
func TestHistoryNoSpikeBeforeTheHeadIsKnown(t *testing.T) {
	var h boundaryHistory
	h.startTerm()
	now := time.Unix(1_800_000_000, 0)
	tick := func() {
		now = now.Add(time.Second)
		h.sample(now.Unix(), now, idlePub{0})
	}
	tick()
	h.raiseHead(1_000_005) // an append here, to a long log
	tick()
	h.noteHead("e", 1_000_005)
	tick()
	h.raiseHead(1_000_008)
	tick()
	s := h.ring.After(now.Unix() - 4)
	if len(s.Appended) != 4 || s.Appended[0] != nil || s.Appended[1] != nil || s.Appended[2] != nil ||
		s.Appended[3] == nil || *s.Appended[3] != 3 {
		t.Fatalf("appended: %v", s.Appended)
	}
}

// busyPub is a publisher that is not idle (a batch in flight).
type busyPub struct{}

func (busyPub) CaughtUp() (uint64, bool) { return 0, false }

// TestHistoryPublishedCountsABatchInFlight: a publisher idle at 0, woken
// by an append of 120, sampled while its batch is in flight (not idle,
// nothing acknowledged yet in the term) and then acknowledged: the
// published series counts the 120, and the lag is 120 then 0.
func TestHistoryPublishedCountsABatchInFlight(t *testing.T) {
	var h boundaryHistory
	h.startTerm()
	h.noteHead("e", 0)
	now := time.Unix(1_800_000_000, 0)
	tick := func(p interface{ CaughtUp() (uint64, bool) }) {
		now = now.Add(time.Second)
		h.sample(now.Unix(), now, p)
	}
	tick(idlePub{0})
	tick(idlePub{0})
	h.raiseHead(120)
	tick(busyPub{})
	h.published.Store(120)
	tick(busyPub{})
	s := h.ring.After(now.Unix() - 4)
	var pub uint32
	for _, v := range s.Published {
		if v != nil {
			pub += *v
		}
	}
	if pub != 120 || s.LagEvents[2] == nil || *s.LagEvents[2] != 120 || *s.LagEvents[3] != 0 {
		t.Fatalf("published %d (%v), lag %v", pub, s.Published, s.LagEvents)
	}
}

// BenchmarkHistorySample1000: one pass of the history sampler over 1,000
// boundaries the node leads, with appends between passes: what the
// sampler costs a node each second (docs/console.md, "What it costs").
// ns/op per second is the share of one core: 1,000,000 ns/op would be
// 0.1%.
func BenchmarkHistorySample1000(b *testing.B) {
	hs := make([]boundaryHistory, 1000)
	for i := range hs {
		hs[i].noteHead("e", 100)
		hs[i].startTerm()
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

// TestHistoryStandbyKeepsNoHeadMarks: a node that does not lead the
// boundary keeps no marks of the heads it sees for the lag in seconds
// (only the leader's lag reads them): they grew to history.Len a
// boundary on standby nodes; once it leads it keeps them again, and
// losing the lead frees them.
func TestHistoryStandbyKeepsNoHeadMarks(t *testing.T) {
	var h boundaryHistory
	now := time.Unix(1_700_000_000, 0)
	h.noteHead("e1", 1)
	for i := range 100 {
		h.raiseHead(uint64(2 + i))
		h.sample(now.Unix()+int64(i), now.Add(time.Duration(i)*time.Second), busyPub{})
	}
	if m := h.pending.Marks(); m != 0 {
		t.Fatalf("a standby node keeps %d head marks, want none", m)
	}
	h.startTerm()
	for i := range 10 {
		h.raiseHead(uint64(200 + i))
		h.sample(now.Unix()+int64(100+i), now.Add(time.Duration(100+i)*time.Second), busyPub{})
	}
	if m := h.pending.Marks(); m == 0 {
		t.Fatal("the leader keeps no head marks: its lag in seconds would be blind")
	}
	h.leads.Store(false)
	h.sample(now.Unix()+200, now.Add(200*time.Second), busyPub{})
	if m := h.pending.Marks(); m != 0 {
		t.Fatalf("after losing the lead, %d head marks kept", m)
	}
}
