package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/stream"
)

// SubscribeFunc starts one subscription after (opts.Epoch, after) and
// returns when it ends; it must pass opts (the epoch and the callbacks that
// record going live and falling behind) to the subscription.
type SubscribeFunc func(ctx context.Context, after uint64, opts event.SubscribeOptions, h event.Handler) error

// Consumer is an application that processes a boundary's events
// effectively once: it records each delivery, then saves (epoch, position)
// atomically in its checkpoint file, and resumes from that file when it
// starts again. A kill between the two is the only source of duplicates
// (C5).
type Consumer struct {
	Name           string
	Rec            *Recorder
	CheckpointFile string
	// Delay slows the handler (a slow consumer, S9).
	Delay     time.Duration
	Subscribe SubscribeFunc
}

// LoadCheckpoint reads a consumer's checkpoint file: epoch and position
// (empty and 0 when there is none).
func LoadCheckpoint(name string) (epoch string, pos uint64, err error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", 0, fmt.Errorf("checkpoint file %s: %q", name, b)
	}
	pos, err = strconv.ParseUint(f[1], 10, 64)
	return f[0], pos, err
}

func saveCheckpoint(name, epoch string, pos uint64) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(epoch+" "+strconv.FormatUint(pos, 10)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// Run subscribes from the saved checkpoint until ctx ends, subscribing again
// (from the checkpoint) whenever a subscription ends.
func (c *Consumer) Run(ctx context.Context) error {
	for n := 1; ctx.Err() == nil; n++ {
		epoch, after, err := LoadCheckpoint(c.CheckpointFile)
		if err != nil {
			return err
		}
		sub := c.Rec.Proc() + "/" + strconv.Itoa(n)
		c.Rec.Write(Record{Kind: KindSubscribe, Consumer: c.Name, Sub: sub, After: after, Epoch: epoch})
		opts := event.SubscribeOptions{Epoch: epoch,
			OnCaughtUp: func(next uint64) {
				c.Rec.Write(Record{Kind: KindCaughtUp, Consumer: c.Name, Sub: sub, Pos: next})
			},
			OnFellBehind: func(next uint64, reason string) {
				c.Rec.Write(Record{Kind: KindFellBehind, Consumer: c.Name, Sub: sub, Pos: next, Reason: reason})
			}}
		err = c.Subscribe(ctx, after, opts, func(ctx context.Context, e event.Event) error {
			c.Rec.Write(Record{Kind: KindDeliver, Consumer: c.Name, Sub: sub, Pos: e.Position, ID: e.ID, Epoch: e.Epoch})
			if err := saveCheckpoint(c.CheckpointFile, e.Epoch, e.Position); err != nil {
				return err
			}
			if c.Delay > 0 {
				t := time.NewTimer(c.Delay)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		c.Rec.Write(Record{Kind: KindNote, Note: fmt.Sprintf("consumer %s subscription %s ended: %v", c.Name, sub, err)})
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// AppendFunc appends prepared-or-not events with their ids set.
type AppendFunc func(ctx context.Context, in []event.Input) (event.AppendResult, error)

// Appender appends batches of events with ids of its own and records each
// acknowledged batch. A failed append is retried with the same ids (an
// idempotent retry) until it is acknowledged, so no outcome stays unknown
// except the one in flight when the process dies or ctx ends.
type Appender struct {
	Rec    *Recorder
	Append AppendFunc
	Batch  int
	Pause  time.Duration
	// Limit stops after that many events (0: until ctx ends).
	Limit int
	// Stop, when set, is asked before each batch: true stops the appender.
	Stop func() bool
}

// Run appends until ctx ends or Limit is reached.
func (a *Appender) Run(ctx context.Context) {
	done := 0
	for i := 0; ctx.Err() == nil && (a.Limit == 0 || done < a.Limit) && (a.Stop == nil || !a.Stop()); i++ {
		in := make([]event.Input, a.Batch)
		ids := make([]string, a.Batch)
		for j := range in {
			ids[j] = event.NewID()
			in[j] = event.Input{ID: ids[j], Type: "fault.test", Data: json.RawMessage(fmt.Sprintf(`{"i":%d,"j":%d}`, i, j))}
		}
		for try := 0; ctx.Err() == nil; try++ {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res, err := a.Append(actx, in)
			cancel()
			if err == nil {
				a.Rec.Write(Record{Kind: KindAppendOK, Pos: res.First, IDs: ids})
				done += len(in)
				break
			}
			if try%20 == 0 {
				a.Rec.Write(Record{Kind: KindNote, Note: "append failed, retrying with the same ids: " + err.Error()})
			}
			serviceutil.Sleep(ctx, 100*time.Millisecond)
		}
		if a.Pause > 0 {
			serviceutil.Sleep(ctx, a.Pause)
		}
	}
}

// RecordingStore wraps a node's store and records every checkpoint write
// (term, position, accepted or refused) and every new lease term. Before
// each write it reads the stream's last sequence from the node's JetStream
// and records it (ack_evidence): what JetStream itself holds, not what the
// publisher says it saw acknowledged, is what C6 compares the checkpoint
// with. With ReadBack it reads the checkpoint back after each accepted
// write and records it (checkpoint_seen): C6's "never back" and "beyond
// the head" on every write, where the harness cannot sample the store
// (SQLite: the node's process owns it).
type RecordingStore struct {
	backend.Store
	Rec *Recorder
	// ReadBack: read the checkpoint back after each accepted write. Only
	// where this process is the only writer (SQLite): with two nodes, the
	// order of two read-backs' records is not the order of the reads.
	ReadBack bool

	mu    sync.Mutex
	term  uint64
	js    jetstream.JetStream
	ready chan struct{}
	once  sync.Once
}

func (s *RecordingStore) readyCh() chan struct{} {
	s.once.Do(func() { s.ready = make(chan struct{}) })
	return s.ready
}

// SetJS gives the wrapper the node's JetStream, to read the stream back.
// Checkpoint writes wait for it.
func (s *RecordingStore) SetJS(js jetstream.JetStream) {
	s.mu.Lock()
	first := s.js == nil
	s.js = js
	s.mu.Unlock()
	if first {
		close(s.readyCh())
	}
}

// Acked records an acknowledged batch as the publisher reports it (the
// node's after-ack hook). C7 uses it (a deposed publisher keeps
// publishing); C6 does not trust it.
func (s *RecordingStore) Acked(last uint64) {
	s.Rec.Write(Record{Kind: KindAck, Pos: last})
}

// SaveCheckpoint reads the stream's last sequence from JetStream, records
// it, then passes the write through and records it and its outcome. When
// JetStream cannot be read the write is not passed through (an error the
// publisher retries): an accepted write without evidence would be C6.
func (s *RecordingStore) SaveCheckpoint(ctx context.Context, boundary string, l backend.Lease, pos uint64) error {
	select {
	case <-s.readyCh():
	case <-ctx.Done():
		return fmt.Errorf("faultinject: no JetStream to read the acknowledged sequence from: %w", ctx.Err())
	}
	s.mu.Lock()
	js := s.js
	s.mu.Unlock()
	st, err := js.Stream(ctx, stream.Name(boundary))
	if err != nil {
		s.Rec.Write(Record{Kind: KindNote, Note: "checkpoint write held back: stream info: " + err.Error()})
		return fmt.Errorf("faultinject: read the stream's last sequence before the checkpoint write: %w", err)
	}
	s.Rec.Write(Record{Kind: KindAckEvidence, Pos: st.CachedInfo().State.LastSeq, Note: "stream last sequence before the checkpoint write"})
	sent := time.Now().UnixNano()
	err = s.Store.SaveCheckpoint(ctx, boundary, l, pos)
	r := Record{Kind: KindCheckpoint, T0: sent, Term: l.Term, Holder: l.Holder, Pos: pos, OK: err == nil}
	if err != nil {
		r.Err = err.Error()
		r.Stale = errors.Is(err, event.ErrLeaseLost)
	}
	s.Rec.Write(r)
	if err == nil && s.ReadBack {
		if cp, rerr := s.Store.Checkpoint(ctx, boundary); rerr == nil {
			s.Rec.Write(Record{Kind: KindSeen, Pos: cp, Note: "read back after the write"})
		}
	}
	return err
}

// AcquireLease records a new term.
func (s *RecordingStore) AcquireLease(ctx context.Context, boundary, holder string, gone []string, ttl time.Duration) (backend.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, boundary, holder, gone, ttl)
	if err == nil {
		s.mu.Lock()
		changed := l.Term != s.term
		s.term = l.Term
		s.mu.Unlock()
		if changed {
			s.Rec.Write(Record{Kind: KindLease, Term: l.Term, Holder: l.Holder})
		}
	}
	return l, err
}

// HeadHolder keeps the publisher's probe of PostgreSQL (its status reason
// while an append holds the head row).
func (s *RecordingStore) HeadHolder(ctx context.Context, boundary string) (string, error) {
	if p, ok := s.Store.(interface {
		HeadHolder(ctx context.Context, boundary string) (string, error)
	}); ok {
		return p.HeadHolder(ctx, boundary)
	}
	return "", nil
}

// ReadStream reads every message of a boundary's stream (headers only) and
// records it: sequence, position, event id, epoch (I2, C3, C4, C7).
func ReadStream(ctx context.Context, js jetstream.JetStream, boundary string, rec *Recorder, node string) (first, last uint64, err error) {
	s, err := js.Stream(ctx, stream.Name(boundary))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, nil // a standby that never led in this process
	}
	if err != nil {
		return 0, 0, fmt.Errorf("stream of %s: %w", node, err)
	}
	info := s.CachedInfo()
	if info.State.Msgs == 0 {
		return info.State.FirstSeq, info.State.LastSeq, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return 0, 0, err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; {
		batch, err := cons.Fetch(int(min(500, info.State.LastSeq-seq+1)), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return 0, 0, fmt.Errorf("%s stream from %d: %w", node, seq, err)
		}
		n := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return 0, 0, err
			}
			h := msg.Headers()
			pos, _ := strconv.ParseUint(h.Get(stream.HeaderPosition), 10, 64)
			rec.Write(Record{Kind: KindStream, Node: node, Seq: md.Sequence.Stream, Pos: pos, ID: h.Get(stream.HeaderEventID), Epoch: h.Get(stream.HeaderEpoch)})
			seq = md.Sequence.Stream + 1
			n++
		}
		if n == 0 {
			return 0, 0, fmt.Errorf("%s stream: nothing read at sequence %d of %d..%d", node, seq, info.State.FirstSeq, info.State.LastSeq)
		}
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}
