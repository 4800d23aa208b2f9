// Fast-ingest batches: how a run publishes a large page of events as one
// JetStream batch (nats-server 2.14 and later, a stream with
// allow_batched), acknowledged every few hundred messages and at its
// commit instead of once per message (docs/design.md §5,
// docs/performance.md "Fast-ingest batches").

package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/stream"
)

// batchAckEvery is how many messages the publisher asks the server to
// acknowledge at a time within a batch: the server's answer to the first
// message says what it grants (500 when the batch is the only one open on
// the stream; fewer, growing, when others are). The run keeps at most two
// such windows unacknowledged.
const batchAckEvery = 500

// batchMin is the smallest full page sent as one batch: for small pages
// the wait for the commit between pages costs more than the
// acknowledgements it saves (a review measured 3,000 events in full pages
// of 2: 340 ms as batches, 206 ms as single publishes). 32 itself is a
// choice, not measured: a size where 500-message flow windows matter.
const batchMin = 32

// liveBatchMin is the smallest page short of a full one (live traffic)
// sent as one batch. Pages of 100 or more are what live traffic of large
// appends reads (the api workload's batches of 100): as batches they cost
// the node 5-21% less CPU per event in alternating runs. Pages of 32 to 99
// are most of what single-event appends read; batched in a first version,
// they made the relay fall behind at 20,000 appends a second in two runs
// of five (docs/performance.md, "Live pages as batches"), so they stay
// single publishes.
const liveBatchMin = 100

// asBatch reports whether a page of n events, read with pages of at most
// full, goes as one fast-ingest batch: a full page of batchMin or more (a
// backlog's), or a live one of liveBatchMin or more (large appends), where
// the acknowledgement per message is most of the publishing's cost. A
// shorter page goes through the window of single publishes, which does not
// wait for a commit between pages.
func asBatch(n, full int) bool {
	return n == full && n >= batchMin || n >= liveBatchMin
}

// batcher is a run's way to publish batches: the inbox the server answers
// on, and the answers. nil when the stream does
// not allow batches (an older server, or a stream created otherwise), or
// when messages carry Nats-Msg-Id (a duplicate id is skipped inside a
// batch, where a single publish says it was a duplicate).
type batcher struct {
	nc      *nats.Conn
	inbox   string
	sub     *nats.Subscription
	replies chan *nats.Msg
}

// newBatcher subscribes to the answers of the run's batches when the
// boundary's stream allows them; nil otherwise, and on any error (the run
// then publishes one message at a time, as before).
func (r *run) newBatcher(ctx context.Context) *batcher {
	p := r.p
	if p.cfg.MsgID {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, jsTimeout)
	s, err := p.cfg.JS.Stream(ictx, stream.Name(p.cfg.Boundary))
	cancel()
	if err != nil {
		p.log.Warn("the stream's settings could not be read: this drain publishes one message at a time", "err", err)
		return nil
	}
	if !s.CachedInfo().Config.AllowBatchPublish {
		return nil
	}
	nc := p.cfg.JS.Conn()
	b := &batcher{nc: nc, inbox: nc.NewRespInbox(), replies: make(chan *nats.Msg, 1024)}
	if b.sub, err = nc.ChanSubscribe(b.inbox+".>", b.replies); err != nil {
		p.log.Warn("no subscription for the batches' answers: this drain publishes one message at a time", "err", err)
		return nil
	}
	return b
}

// close ends the subscription.
func (b *batcher) close() {
	if b != nil {
		_ = b.sub.Unsubscribe()
	}
}

// batchReply is an answer on a batch's reply subjects: a flow
// acknowledgement ("ack": the first seq messages are stored; send up to
// msgs more), a message's error ("err", at seq), a gap ("gap"), or, with
// no type, the commit's PubAck (the stream and the sequence of the
// batch's last message, and its count) or an error of the batch.
type batchReply struct {
	Type   string              `json:"type"`
	Seq    uint64              `json:"seq"`
	Msgs   int                 `json:"msgs"`
	Stream string              `json:"stream"`
	Batch  string              `json:"batch"`
	Count  int                 `json:"count"`
	Error  *jetstream.APIError `json:"error"`
}

// sendBatch publishes events (consecutive positions) as one batch. It
// awaits every single publish in flight first, so that the batch is the
// only one open on the stream and every message before it is stored. Each
// message expects the previous position as the stream's last sequence
// (I2); the server checks that for every message of a batch and ends the
// batch at the first that fails it, keeping those before it
// (TestFastIngestChecksExpectedLastSequence). The last message commits the
// batch, and its PubAck, the stream's sequence of that message, says
// every message of the batch is stored: then, and only then, the batch is
// checkpointed (I3), as a batch of single publishes is at its last
// acknowledgement.
func (fl *flight) sendBatch(ctx context.Context, events []event.Event) error {
	if err := fl.settle(ctx, 0); err != nil {
		return err
	}
	p, b := fl.r.p, fl.batch
	// The server knows an open batch by its id alone, on the stream: a
	// stale publisher's or an abandoned batch's id must never be this one.
	id := event.NewID()
	n := len(events)
	first, last := events[0].Position, events[n-1].Position
	start := time.Now()
	timer := time.NewTimer(p.cfg.AckTimeout)
	defer timer.Stop()
	acked, every := 0, 10
	for i := range events {
		e := &events[i]
		if e.Position != first+uint64(i) {
			return fmt.Errorf("store returned position %d at index %d of a batch from %d: a gap in the store", e.Position, i, first)
		}
		msg, err := stream.Message(e, false)
		if err != nil {
			return err
		}
		msg.Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(e.Position-1, 10)}
		msg.Reply = b.reply(id, i+1, n)
		if err := b.nc.PublishMsg(msg); err != nil {
			return publishError(e, msg, err)
		}
		// At most two flow windows unacknowledged; the last message is
		// the commit, answered by the PubAck below. Answers already in
		// are read without waiting: a refusal stops the sending at once.
		for wait := i+1-acked >= 2*every; i+1 < n; wait = i+1-acked >= 2*every {
			r, ok, err := fl.batchReply(ctx, timer, id, first, wait)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if r.Type == "" {
				return fmt.Errorf("publish batch of positions %d to %d: acknowledged at %d of %d messages (%+v)", first, last, i+1, n, r)
			}
			acked, every = int(r.Seq), max(r.Msgs, 1)
			resetTimer(timer, p.cfg.AckTimeout)
		}
	}
	// The wait for the commit is bounded from the last message sent, and
	// again from each acknowledgement on the way (a large page of large
	// messages takes its time; no progress within AckTimeout fails).
	resetTimer(timer, p.cfg.AckTimeout)
	for {
		r, _, err := fl.batchReply(ctx, timer, id, first, true)
		if err != nil {
			return err
		}
		if r.Type == "ack" {
			resetTimer(timer, p.cfg.AckTimeout)
			continue
		}
		if name := stream.Name(p.cfg.Boundary); r.Stream != name {
			return &otherStreamError{pos: last, got: r.Stream, stream: name}
		}
		if r.Seq != last || r.Count != n {
			return fmt.Errorf("batch of positions %d to %d acknowledged with %d messages up to stream sequence %d: refusing to continue out of place",
				first, last, r.Count, r.Seq)
		}
		break
	}
	p.batches.Add(1)
	return fl.acked(first, last, start, true)
}

// reply is the reply subject of message i (from 1) of batch id of n
// messages: <inbox>.<id>.<ack every>.fail.<i>.<operation>.$FI, the
// operation 0 (start) for the first, 2 (commit) for the last, else 1
// (append). "fail": a message missing in between ends the batch.
func (b *batcher) reply(id string, i, n int) string {
	op := "1"
	switch {
	case i == n:
		op = "2"
	case i == 1:
		op = "0"
	}
	return b.inbox + "." + id + "." + strconv.Itoa(batchAckEvery) + ".fail." + strconv.Itoa(i) + "." + op + ".$FI"
}

// resetTimer sets t to fire after d from now.
func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// batchReply returns the next answer for batch id (answers of earlier
// batches are passed over): a flow acknowledgement or the PubAck; with
// wait false, only one already in (ok false: none). An error, a gap, no
// answer within the timer, or ctx's end is an error.
func (fl *flight) batchReply(ctx context.Context, timer *time.Timer, id string, first uint64, wait bool) (r batchReply, ok bool, err error) {
	p, b := fl.r.p, fl.batch
	prefix := b.inbox + "." + id + "."
	for {
		var m *nats.Msg
		if wait {
			select {
			case m = <-b.replies:
			case <-timer.C:
				// An answer that came with the timer's end still counts
				// (select picks either at random).
				select {
				case m = <-b.replies:
				default:
					return r, false, fmt.Errorf("publish batch from position %d: no acknowledgement within %s", first, p.cfg.AckTimeout)
				}
			case <-ctx.Done():
				return r, false, fmt.Errorf("publish batch from position %d: %w", first, ctx.Err())
			}
		} else {
			select {
			case m = <-b.replies:
			default:
				return r, false, nil
			}
		}
		if !strings.HasPrefix(m.Subject, prefix) {
			continue
		}
		r = batchReply{}
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return r, false, fmt.Errorf("publish batch from position %d: an answer that is no JSON (%q): %w", first, m.Data, err)
		}
		switch {
		case r.Error != nil:
			// The message the error is of: the answer's seq for an
			// "err", else the one the reply subject numbers.
			pos := first
			if i := batchSeq(m.Subject); r.Type == "err" && r.Seq > 0 {
				pos = first + r.Seq - 1
			} else if i > 0 {
				pos = first + i - 1
			}
			if wrongLastSequence(r.Error) {
				return r, false, fmt.Errorf("publish position %d refused: the stream's last sequence is not %d (another publisher, or the stream changed): %w",
					pos, pos-1, r.Error)
			}
			return r, false, fmt.Errorf("publish position %d (in a batch from %d): %w", pos, first, r.Error)
		case r.Type == "gap":
			return r, false, fmt.Errorf("publish batch from position %d: the server reports a gap in the batch (%s)", first, m.Data)
		case r.Type != "" && r.Type != "ack":
			return r, false, fmt.Errorf("publish batch from position %d: an answer of unknown type %q", first, r.Type)
		}
		return r, true, nil
	}
}

// batchSeq is the message number in a batch's reply subject, 0 if none.
func batchSeq(subject string) uint64 {
	parts := strings.Split(subject, ".")
	if len(parts) < 4 {
		return 0
	}
	i, _ := strconv.ParseUint(parts[len(parts)-3], 10, 64)
	return i
}

// publishError is the error of a publish the client refused to send.
func publishError(e *event.Event, msg *nats.Msg, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("publish position %d (event %s): the message is %d bytes, more than the NATS max payload: "+
			"it was not written through orisun's append (which checks the limit); raise ORISUN_NATS_MAX_PAYLOAD or repair the row: %w",
			e.Position, e.ID, len(msg.Data)+headerSize(msg.Header), err)
	}
	return fmt.Errorf("publish position %d: %w", e.Position, err)
}
