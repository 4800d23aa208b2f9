package faults

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Stored is one event of the store's final content.
type Stored struct {
	Pos uint64
	ID  string
}

// Violation is one broken rule of the checker.
type Violation struct {
	Check string // C1 … C8
	Msg   string
}

func (v Violation) String() string { return v.Check + ": " + v.Msg }

// Options tune what Check demands.
type Options struct {
	// Epoch is the boundary's epoch; deliveries of another are C2.
	Epoch string
	// NoDuplicates demands zero duplicate deliveries (S1).
	NoDuplicates bool
	// SavesEach says the consumers save (epoch, position) after every
	// event (faults.Consumer): a subscription in the same process then
	// resumes exactly where the last one stopped, one in a new process at
	// most one event behind (killed between the delivery and the save).
	SavesEach bool
	// Liveness is C8's bound: from each heal record to the next settled
	// record. Zero: 2 minutes.
	Liveness time.Duration
}

// Stats summarise a history.
type Stats struct {
	Events, Deliveries, Duplicates, Subscriptions, Faults int
	MaxTakeover, MaxLagAfterHeal                          time.Duration
}

// Check judges a history against the store's final content (positions
// 1..head in order) and returns every violation of C1–C8 it finds, at most
// a few per rule and consumer, and the statistics.
func Check(h []Record, store []Stored, o Options) ([]Violation, Stats) {
	if o.Liveness == 0 {
		o.Liveness = 2 * time.Minute
	}
	c := &checker{o: o, byPos: map[uint64]string{}, byID: map[string]uint64{}, limit: map[string]int{}}
	for _, e := range store {
		c.byPos[e.Pos] = e.ID
		c.byID[e.ID] = e.Pos
		c.head = max(c.head, e.Pos)
	}
	c.stats.Events = len(store)
	c.storeDense(store)
	c.appends(h)
	c.consumers(h)
	c.streams(h)
	c.checkpoints(h)
	c.liveness(h)
	return c.out, c.stats
}

type checker struct {
	o     Options
	byPos map[uint64]string
	byID  map[string]uint64
	head  uint64
	out   []Violation
	limit map[string]int
	stats Stats
}

// add records a violation; at most 5 per key, so one broken run does not
// print a million lines.
func (c *checker) add(check, key, format string, args ...any) {
	k := check + "/" + key
	c.limit[k]++
	if c.limit[k] > 5 {
		return
	}
	c.out = append(c.out, Violation{Check: check, Msg: fmt.Sprintf(format, args...)})
}

// storeDense: the ground truth itself must be 1..head (I1).
func (c *checker) storeDense(store []Stored) {
	for i, e := range store {
		if e.Pos != uint64(i+1) {
			c.add("C1", "store", "the store holds position %d at index %d: positions are not dense (I1)", e.Pos, i)
			return
		}
	}
}

// appends: C1 for acknowledged appends (they survive, at their positions),
// C2 for failed ones (never stored).
func (c *checker) appends(h []Record) {
	for _, r := range h {
		switch r.Kind {
		case KindAppendOK:
			for i, id := range r.IDs {
				pos := r.Pos + uint64(i)
				if got := c.byPos[pos]; got != id {
					c.add("C1", "append", "acknowledged append of %s at position %d (by %s) is lost: the store holds %q there", id, pos, r.Proc, got)
				}
			}
		case KindAppendFailed:
			for _, id := range r.IDs {
				if pos, ok := c.byID[id]; ok {
					c.add("C2", "append", "failed append of %s (by %s: %s) is in the store at position %d", id, r.Proc, r.Err, pos)
				}
			}
		}
	}
}

type subState struct {
	consumer string
	next     uint64 // position the subscription must deliver next
}

// consumers: C1 (every position delivered), C2 (exists, this epoch), C3
// (one id per position), C4 (order after dropping the seen), C5 (no
// duplicate inside one subscription).
func (c *checker) consumers(h []Record) {
	subs := map[string]*subState{}
	type consState struct {
		max  uint64
		seen map[uint64]string
		proc string
	}
	cons := map[string]*consState{}
	var names []string
	get := func(name string) *consState {
		s := cons[name]
		if s == nil {
			s = &consState{seen: map[uint64]string{}}
			cons[name] = s
			names = append(names, name)
		}
		return s
	}
	for _, r := range h {
		switch r.Kind {
		case KindSubscribe:
			cs := get(r.Consumer)
			if c.o.SavesEach && cs.max > r.After {
				if cs.proc == r.Proc || cs.max-r.After > 1 {
					c.add("C5", r.Consumer+"resume", "%s subscription %s resumed after %d, %d behind what it processed (%d) in %s",
						r.Consumer, r.Sub, r.After, cs.max-r.After, cs.max, map[bool]string{true: "the same process", false: "a new process"}[cs.proc == r.Proc])
				}
			}
			cs.proc = r.Proc
			subs[r.Consumer+"/"+r.Sub] = &subState{consumer: r.Consumer, next: r.After + 1}
			c.stats.Subscriptions++
		case KindDeliver:
			c.stats.Deliveries++
			cs := get(r.Consumer)
			if id, ok := c.byPos[r.Pos]; !ok || id != r.ID {
				c.add("C2", r.Consumer, "%s delivered (%d, %s), the store holds %q at %d", r.Consumer, r.Pos, r.ID, id, r.Pos)
			}
			if c.o.Epoch != "" && r.Epoch != c.o.Epoch {
				c.add("C2", r.Consumer+"epoch", "%s delivered position %d of epoch %s, the boundary's is %s", r.Consumer, r.Pos, r.Epoch, c.o.Epoch)
			}
			if prev, ok := cs.seen[r.Pos]; ok && prev != r.ID {
				c.add("C3", r.Consumer, "%s got position %d as %s and as %s", r.Consumer, r.Pos, prev, r.ID)
			}
			cs.seen[r.Pos] = r.ID
			sub := subs[r.Consumer+"/"+r.Sub]
			if sub == nil {
				c.add("C5", r.Consumer, "%s delivered position %d in subscription %q that never started", r.Consumer, r.Pos, r.Sub)
			} else {
				if r.Pos != sub.next {
					if r.Pos < sub.next {
						c.add("C5", r.Consumer, "%s subscription %s delivered position %d again (next was %d): a duplicate inside one subscription", r.Consumer, r.Sub, r.Pos, sub.next)
					} else {
						c.add("C4", r.Consumer+"sub", "%s subscription %s skipped from %d to %d", r.Consumer, r.Sub, sub.next-1, r.Pos)
					}
				}
				sub.next = r.Pos + 1
			}
			switch {
			case r.Pos <= cs.max:
				c.stats.Duplicates++
			case r.Pos != cs.max+1:
				c.add("C4", r.Consumer, "%s delivered position %d after %d: positions %d..%d were skipped", r.Consumer, r.Pos, cs.max, cs.max+1, r.Pos-1)
				cs.max = r.Pos
			default:
				cs.max = r.Pos
			}
		}
	}
	if c.o.NoDuplicates && c.stats.Duplicates > 0 {
		c.add("C5", "dups", "%d duplicate deliveries in a run that must have none", c.stats.Duplicates)
	}
	for _, name := range names {
		cs := cons[name]
		var missing []uint64
		for p := uint64(1); p <= c.head; p++ {
			if _, ok := cs.seen[p]; !ok {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			c.add("C1", name, "%s never got %d of the %d stored positions: %s", name, len(missing), c.head, spans(missing))
		}
	}
}

// streams: every node's final stream has sequence = position with the
// store's event, contiguous (C3, C4, C7).
func (c *checker) streams(h []Record) {
	type st struct{ last uint64 }
	nodes := map[string]*st{}
	for _, r := range h {
		if r.Kind != KindStream {
			continue
		}
		s := nodes[r.Node]
		if s == nil {
			s = &st{}
			nodes[r.Node] = s
		}
		if r.Seq != r.Pos {
			c.add("C4", "stream"+r.Node, "%s stream sequence %d carries position %d (I2)", r.Node, r.Seq, r.Pos)
		}
		if id := c.byPos[r.Pos]; id != r.ID {
			c.add("C3", "stream"+r.Node, "%s stream sequence %d carries event %s, the store holds %q at position %d (C7: a message out of place)", r.Node, r.Seq, r.ID, id, r.Pos)
		}
		if c.o.Epoch != "" && r.Epoch != c.o.Epoch {
			c.add("C7", "stream"+r.Node, "%s stream sequence %d carries epoch %s, the boundary's is %s", r.Node, r.Seq, r.Epoch, c.o.Epoch)
		}
		if s.last != 0 && r.Seq != s.last+1 {
			c.add("C4", "streamgap"+r.Node, "%s stream goes from sequence %d to %d", r.Node, s.last, r.Seq)
		}
		s.last = r.Seq
	}
}

// checkpoints: C6 (never back, never ahead of the stream's last sequence
// as JetStream reported it right before the write, a stale term changes
// nothing) and C7 (a deposed publisher
// stops).
func (c *checker) checkpoints(h []Record) {
	acked := map[string]uint64{}   // per process: the stream's last sequence before its latest write
	deposed := map[string]uint64{} // per process: term refused
	var seen uint64
	// firstEnd: per term, when its first accepted write returned. A write
	// of a lower term is stale only if it was sent after that: a write
	// sent before (and recorded late, say by a process stopped with
	// SIGSTOP while it waited for the reply) took effect before the term
	// changed.
	firstEnd := map[uint64]int64{}
	for _, r := range h {
		switch r.Kind {
		case KindAckEvidence:
			// What JetStream itself held, read just before the write:
			// the only acknowledgement C6 trusts.
			acked[r.Proc] = r.Pos
		case KindAck:
			// The publisher's own word: only for C7.
			if t, ok := deposed[r.Proc]; ok {
				c.add("C7", r.Proc, "%s was refused with term %d and still had position %d acknowledged afterwards: a deposed publisher must stop", r.Proc, t, r.Pos)
			}
		case KindCheckpoint:
			if r.OK {
				if r.Pos > acked[r.Proc] {
					c.add("C6", "ahead"+r.Proc, "%s wrote checkpoint %d (term %d) with only %d acknowledged by JetStream", r.Proc, r.Pos, r.Term, acked[r.Proc])
				}
				for term, end := range firstEnd {
					if term > r.Term && end < r.T0 {
						c.add("C6", "stale", "%s wrote checkpoint %d with term %d, accepted although term %d had written before it was sent", r.Proc, r.Pos, r.Term, term)
						break
					}
				}
				if _, ok := firstEnd[r.Term]; !ok {
					firstEnd[r.Term] = r.T
				}
			} else if r.Stale {
				deposed[r.Proc] = r.Term
			}
		case KindLease:
			if t, ok := deposed[r.Proc]; ok && r.Term > t {
				delete(deposed, r.Proc)
			}
		case KindSeen:
			if r.Pos < seen {
				c.add("C6", "back", "the checkpoint went back from %d to %d", seen, r.Pos)
			}
			seen = max(seen, r.Pos)
			if r.Pos > c.head {
				c.add("C6", "beyond", "the checkpoint %d is beyond the head %d", r.Pos, c.head)
			}
		case KindTakeover:
			c.stats.MaxTakeover = max(c.stats.MaxTakeover, time.Duration(r.Dur))
		case KindFault:
			c.stats.Faults++
		}
	}
}

// AuditRow is one change of the checkpoint as the database saw it (the
// PostgreSQL audit trigger of the fault suite): from Old to New, in the
// order the row was updated.
type AuditRow struct {
	ID       int64
	Old, New uint64
	Term     uint64
}

// CheckAudit judges every change of the checkpoint the database recorded
// (C6): never back, never beyond the head, and each change starts where
// the last one ended (nothing changed it unrecorded).
func CheckAudit(rows []AuditRow, head uint64) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		if len(out) < 10 {
			out = append(out, Violation{Check: "C6", Msg: fmt.Sprintf(format, args...)})
		}
	}
	for i, r := range rows {
		if r.New < r.Old {
			add("audit %d: the checkpoint went back from %d to %d (term %d)", r.ID, r.Old, r.New, r.Term)
		}
		if r.New > head {
			add("audit %d: the checkpoint %d (term %d) is beyond the head %d", r.ID, r.New, r.Term, head)
		}
		if i > 0 && r.Old != rows[i-1].New {
			add("audit %d: the checkpoint changed from %d to %d unrecorded", r.ID, rows[i-1].New, r.Old)
		}
	}
	return out
}

// liveness: after each heal the run settles within the bound (C8).
func (c *checker) liveness(h []Record) {
	var healAt int64
	for _, r := range h {
		switch r.Kind {
		case KindHeal:
			if healAt == 0 {
				healAt = r.T
			}
		case KindSettled:
			if healAt != 0 {
				lag := time.Duration(r.T - healAt)
				c.stats.MaxLagAfterHeal = max(c.stats.MaxLagAfterHeal, lag)
				if lag > c.o.Liveness {
					c.add("C8", "lag", "settled %s after the heal; the bound is %s", lag.Round(time.Millisecond), c.o.Liveness)
				}
				healAt = 0
			}
		}
	}
	if healAt != 0 {
		c.add("C8", "never", "the run never settled after the heal at %s", time.Unix(0, healAt).Format(time.RFC3339Nano))
	}
}

// spans prints positions as ranges: 3..7, 9.
func spans(ps []uint64) string {
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if b.Len() > 200 {
			b.WriteString("…")
			break
		}
		if i == j {
			fmt.Fprintf(&b, "%d", ps[i])
		} else {
			fmt.Fprintf(&b, "%d..%d", ps[i], ps[j])
		}
		i = j + 1
	}
	return b.String()
}
