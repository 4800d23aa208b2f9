// Package history keeps the last minutes of a boundary's figures at
// 1-second resolution in memory, in a ring of fixed size: what the
// console's charts draw (docs/console.md, "One boundary").
// The node's sampler writes one sample a second from what it counts in
// memory; it never reads the store for them. Being internal, it is
// orisun's machinery: its API may change without notice.
package history

import (
	"math"
	"sync"
	"time"
)

// Len is how many seconds a ring keeps: 15 minutes.
const Len = 900

// Sample is one second of a boundary as the node saw it. A value not
// known that second (the node did not lead the boundary, say) is NaN for
// lag seconds and Unknown for the others.
type Sample struct {
	Appended, Published uint32 // events per second
	LagEvents           uint64
	LagSeconds          float32
}

// Unknown marks a count not known that second.
const (
	Unknown   = math.MaxUint32
	UnknownLE = math.MaxUint64
)

// Ring is one boundary's last Len seconds, kept as arrays per figure
// (24 bytes a second, 21.6 KB a ring). Safe for one writer and many
// readers; a reader never holds up the writer for longer than a copy.
type Ring struct {
	mu sync.Mutex
	// sec[i] is the Unix second of slot i (0: empty); the slot of second
	// s is s % Len, so a second the sampler missed is a hole, not a shift.
	sec        [Len]uint32
	appended   [Len]uint32
	published  [Len]uint32
	lagEvents  [Len]uint64
	lagSeconds [Len]float32
	last       int64
}

// Put records the sample of Unix second s (a second older than the last
// put is ignored).
func (r *Ring) Put(s int64, v Sample) {
	r.mu.Lock()
	if s > r.last {
		i := s % Len
		r.sec[i], r.last = uint32(s), s
		r.appended[i], r.published[i], r.lagEvents[i], r.lagSeconds[i] = v.Appended, v.Published, v.LagEvents, v.LagSeconds
	}
	r.mu.Unlock()
}

// Series are the samples of consecutive seconds from Start, as arrays per
// figure; a second with no sample (a hole) is null in JSON, as is a
// figure not known that second.
type Series struct {
	// Start is the Unix second of the first sample, End of the last.
	Start      int64      `json:"start"`
	End        int64      `json:"end"`
	Appended   []*uint32  `json:"appended"`
	Published  []*uint32  `json:"published"`
	LagEvents  []*uint64  `json:"lag_events"`
	LagSeconds []*float32 `json:"lag_seconds"`
}

// After returns the seconds after Unix second after (0: all kept), up to
// the last put, at most Len of them.
func (r *Ring) After(after int64) Series {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Series{}
	if r.last == 0 {
		return out
	}
	start := max(after+1, r.last-Len+1)
	if start > r.last {
		return Series{Start: r.last + 1, End: r.last}
	}
	n := int(r.last - start + 1)
	out.Start, out.End = start, r.last
	out.Appended, out.Published = make([]*uint32, n), make([]*uint32, n)
	out.LagEvents, out.LagSeconds = make([]*uint64, n), make([]*float32, n)
	for k := range n {
		s := start + int64(k)
		i := s % Len
		if int64(r.sec[i]) != s {
			continue
		}
		v := Sample{r.appended[i], r.published[i], r.lagEvents[i], r.lagSeconds[i]}
		if v.Appended != Unknown {
			out.Appended[k] = &v.Appended
		}
		if v.Published != Unknown {
			out.Published[k] = &v.Published
		}
		if v.LagEvents != UnknownLE {
			out.LagEvents[k] = &v.LagEvents
		}
		if !math.IsNaN(float64(v.LagSeconds)) {
			out.LagSeconds[k] = &v.LagSeconds
		}
	}
	return out
}

// Counter turns a position that grows (a head, a published position) into
// the events of each sample: those since the last sample, which are a
// second's at one sample a second. After a missed tick the sample holds
// the seconds since the last one (the missed second is a hole): the sum
// of a series is exact, and no second is guessed. Not safe for
// concurrent use: the sampler owns it.
type Counter struct {
	last uint64
	ok   bool
}

// Rate returns the events since the last call (Unknown on the first call,
// after Reset, or when pos went back: an epoch change or a store
// restored).
func (c *Counter) Rate(pos uint64) uint32 {
	prev, ok := c.last, c.ok
	c.last, c.ok = pos, true
	if !ok || pos < prev {
		return Unknown
	}
	return uint32(min(pos-prev, Unknown-1))
}

// Reset forgets the last position.
func (c *Counter) Reset() { c.ok = false }

// Pending remembers when each position beyond the published one became
// known, to tell the age of the oldest unpublished event to the second
// (as known to the node: its own appends at once, other nodes' within a
// poll interval). It keeps at most Len marks: beyond that it merges the
// newer ones, which keeps the oldest's time. Not safe for concurrent use.
type Pending struct {
	heads []int64 // head positions, growing, from off on
	times []int64 // Unix nanoseconds each head was first seen
	off   int
}

// Seen records that the head was head at now.
func (p *Pending) Seen(head uint64, now time.Time) {
	if k := len(p.heads); k > p.off && uint64(p.heads[k-1]) >= head {
		if uint64(p.heads[k-1]) == head {
			return
		}
		// The head went back (an epoch change): start again.
		p.heads, p.times, p.off = p.heads[:0], p.times[:0], 0
	}
	if len(p.heads)-p.off == Len {
		// Merge the two newest marks: the newer head takes the older time.
		k := len(p.heads)
		p.heads[k-2] = p.heads[k-1]
		p.heads, p.times = p.heads[:k-1], p.times[:k-1]
	}
	if p.off > 0 && len(p.heads) == cap(p.heads) {
		// Compact instead of growing: at most once per cap-off marks.
		n := copy(p.heads, p.heads[p.off:])
		copy(p.times, p.times[p.off:])
		p.heads, p.times, p.off = p.heads[:n], p.times[:n], 0
	}
	p.heads = append(p.heads, int64(head))
	p.times = append(p.times, now.UnixNano())
}

// Marks is how many head positions it keeps (at most Len).
func (p *Pending) Marks() int { return len(p.heads) - p.off }

// Reset forgets every mark and frees their memory.
func (p *Pending) Reset() { *p = Pending{} }

// Age returns how long the event after published has been known, in
// seconds: 0 when the head known is published.
func (p *Pending) Age(published uint64, now time.Time) float32 {
	for p.off < len(p.heads) && uint64(p.heads[p.off]) <= published {
		p.off++
	}
	if p.off == len(p.heads) {
		p.heads, p.times, p.off = p.heads[:0], p.times[:0], 0
		return 0
	}
	return float32(max(0, now.Sub(time.Unix(0, p.times[p.off])).Seconds()))
}
