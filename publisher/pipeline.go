// The pipeline: how a run reads batches from the store and publishes them,
// a bounded window of messages in flight across batches, each expecting the
// previous position as the stream's last sequence (I2), and awaits their
// acknowledgements in order.

package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

// drain publishes from next on, batch after batch, and waits for new events
// when drained. It returns on the first error (the caller resyncs).
//
// The pipeline never empties between batches: while a batch's messages are
// in flight, the next batch is read from the store, and its messages follow
// in the same window (at most Window unacknowledged in all). Each batch's
// checkpoint is handed to the checkpointer as soon as its last message is
// acknowledged, which, acknowledgements arriving in order, means all of it
// (I3); it writes in the background, and drain returns only once what it
// was handed is written. Before this,
// every batch waited for its whole window to drain and then for its read,
// and the stream sat idle meanwhile (docs/performance.md).
func (r *run) drain(ctx context.Context, next uint64) error {
	p := r.p
	poll := time.NewTimer(p.cfg.PollInterval)
	defer poll.Stop()
	// Acknowledgements are awaited even when ctx ends: a clean stop
	// finishes and checkpoints what it started.
	actx := context.WithoutCancel(ctx)
	fl := &flight{r: r, ck: r.startCheckpointer(actx), batch: r.newBatcher(ctx)}
	defer fl.batch.close()
	defer fl.stopTimer()
	var pre chan readResult
	defer func() {
		if pre != nil {
			<-pre // the prefetch ends with ctx or its read
		}
	}()
	check := time.NewTimer(p.cfg.CheckInterval)
	defer check.Stop()
	err := r.pump(ctx, actx, fl, next, poll, check, &pre)
	if err != nil && ctx.Err() == nil {
		err = r.explainPublish(ctx, err)
	}
	// The checkpoints of what the pump saw acknowledged are written before
	// drain returns (a clean stop leaves the checkpoint at the last
	// acknowledged position); a checkpoint that failed (a lost lease, the
	// store down) fails the drain, unless it failed already.
	if cerr := fl.ck.stop(); cerr != nil && (err == nil || errors.Is(cerr, event.ErrLeaseLost)) {
		// A lost lease wins over the pump's own error (most likely the
		// new leader's messages refusing this one's publish): it ends the
		// run, where another error would only resync.
		err = cerr
	}
	return err
}

// pump is drain's loop.
func (r *run) pump(ctx, actx context.Context, fl *flight, next uint64, poll, check *time.Timer, prefetch *chan readResult) error {
	p := r.p
	pre := *prefetch
	defer func() { *prefetch = pre }()
	atHead := false
	for ctx.Err() == nil {
		if err := fl.ck.failure(); err != nil {
			return err
		}
		if err := r.check(ctx, false, next); err != nil {
			return err
		}
		var res readResult
		switch {
		case pre != nil:
			res = <-pre
			pre = nil
		case atHead:
			// The last read was a short page: it reached the head, and is
			// taken as the empty read that says so. A commit that read did
			// not see sends a wake-up after it (the pending one was taken
			// before the read), which the wait below takes. Reading again
			// at once found nothing most of the time: a store round trip
			// per group under live load.
			res = readResult{epoch: r.epoch}
		default:
			r.forgetWake()
			res = r.read(ctx, next)
		}
		atHead = false
		epoch, events, err := res.epoch, res.events, res.err
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, event.ErrCorrupt) && len(events) > 0 {
				// A bad row: the good events before it are published
				// and acknowledged first, then the run stops at it (I4:
				// every committed position before it is published,
				// none around or past it).
				if err := r.upToBadRow(actx, fl, epoch, events, next); err != nil {
					return err
				}
			}
			return fmt.Errorf("read events after %d: %w", next-1, err)
		}
		if epoch != r.epoch {
			return fmt.Errorf("boundary epoch changed from %s to %s: resyncing the stream", r.epoch, epoch)
		}
		if len(events) == 0 {
			// Caught up: await what is in flight (checkpointing each batch
			// once fully acknowledged), but a commit signalled meanwhile
			// is read at once, its events following the ones in flight in
			// the same window. Awaiting every acknowledgement first made
			// live publishing stop-and-wait per short batch.
			woken, err := fl.settleOrWake(actx, 0, p.cfg.Wake)
			if err != nil {
				return err
			}
			if woken {
				continue
			}
			// A commit signalled since the read: read again at once. The
			// head-row probe of the idle path is a store round trip that
			// new events would wait behind; it runs when the publisher
			// really waits.
			select {
			case <-p.cfg.Wake:
				continue
			default:
			}
			p.setState(status.StateLeading, r.idleReason(ctx), nil)
			// Every publish is acknowledged: the stream ends at next-1.
			if err := r.check(ctx, true, next); err != nil {
				return err
			}
			poll.Reset(r.idleWait())
			check.Reset(r.untilCheck())
			p.markProgress()
			p.caughtUp.Store(next - 1)
			if e := p.epoch.Load(); e == nil || *e != r.epoch {
				epoch := r.epoch
				p.epoch.Store(&epoch)
			}
			p.idle.Store(true)
			for waiting := true; waiting; {
				select {
				case <-ctx.Done():
					p.idle.Store(false)
					return nil
				case <-check.C:
					// The check reads the stream only: an idle boundary
					// costs no store read for it.
					if err := r.check(ctx, true, next); err != nil {
						p.idle.Store(false)
						return err
					}
					check.Reset(r.untilCheck())
				case <-p.cfg.Wake:
					waiting = false
				case <-poll.C:
					waiting = false
				case <-fl.ck.failed:
					waiting = false
				}
			}
			p.idle.Store(false)
			p.markProgress()
			if err := r.headWentBack(ctx, next); err != nil {
				return err
			}
			continue
		}
		// After a pause or a stall the state turns back to leading only once
		// a batch is acknowledged: a retry that fails again must not flap
		// the state (and the log) between leading and paused.
		if !p.troubled() {
			p.setState(status.StateLeading, "publishing", nil)
		}
		if events[0].Position != next {
			// The store broke I1: never publish around a hole.
			return fmt.Errorf("store returned position %d after %d: a gap in the store", events[0].Position, next-1)
		}
		last := events[len(events)-1].Position
		if p.cfg.CheckpointBeforeAck {
			// The deliberately broken order of the negative control.
			if err := r.checkpoint(ctx, last); err != nil {
				return err
			}
		}
		// A full batch means more may wait in the store: read it while
		// this one is in flight. A short one reached the head: once it is
		// sent, the loop waits (atHead) instead of reading again.
		if len(events) == p.cfg.BatchSize {
			res := make(chan readResult, 1)
			r.forgetWake()
			if p.life.Go(func() { res <- r.read(ctx, last+1) }) {
				pre = res
			}
		} else {
			atHead = true
		}
		if err := fl.send(actx, events); err != nil {
			return err
		}
		next = last + 1
	}
	// Stopping: finish the batches in flight and checkpoint them.
	return fl.settle(actx, 0)
}

// upToBadRow publishes the good events a read returned before a bad row
// (backend.Reader) and awaits their acknowledgements, so that their
// checkpoint is written before the run stalls at the row.
func (r *run) upToBadRow(ctx context.Context, fl *flight, epoch string, events []event.Event, next uint64) error {
	if epoch != r.epoch {
		return fmt.Errorf("boundary epoch changed from %s to %s: resyncing the stream", r.epoch, epoch)
	}
	if events[0].Position != next {
		return fmt.Errorf("store returned position %d after %d: a gap in the store", events[0].Position, next-1)
	}
	if err := fl.send(ctx, events); err != nil {
		return err
	}
	return fl.settle(ctx, 0)
}

// forgetWake takes a pending wake-up before a read: it was sent after a
// commit (backend.Store.OnAppend, or the node's read of the heads), which
// the read about to start sees. A wake-up that stays pending would read
// again at once and find nothing. Those that come after this are for
// commits the read may not see.
func (r *run) forgetWake() {
	select {
	case <-r.p.cfg.Wake:
	default:
	}
}

// readResult is one store read.
type readResult struct {
	epoch  string
	events []event.Event
	err    error
}

func (r *run) read(ctx context.Context, next uint64) readResult {
	epoch, events, err := r.p.cfg.Store.Read(ctx, r.p.cfg.Boundary, next-1, r.p.cfg.BatchSize, nil)
	return readResult{epoch, events, err}
}

// flight is the window of published, unacknowledged messages, in position
// order, across batches.
type flight struct {
	r  *run
	ck *checkpointer
	// batch publishes large pages as one batch each (batch.go); nil: one
	// message at a time.
	batch *batcher
	// futures and positions of the messages in flight, oldest first.
	futures   []jetstream.PubAckFuture
	positions []uint64
	// ends are the last positions of the batches in flight, oldest first;
	// starts their first positions and when their sending began.
	ends   []uint64
	starts []batchStart
	// timer bounds each wait for an acknowledgement: one for the flight,
	// reset for every message (a timer per message was 1% of the node's
	// CPU and allocations under the api workload, issue 22).
	timer *time.Timer
}

// ackDeadline returns the channel of the flight's timer, reset to fire
// after d.
func (fl *flight) ackDeadline(d time.Duration) <-chan time.Time {
	if fl.timer == nil {
		fl.timer = time.NewTimer(d)
	} else {
		fl.timer.Reset(d)
	}
	return fl.timer.C
}

// stopTimer stops the flight's timer.
func (fl *flight) stopTimer() {
	if fl.timer != nil {
		fl.timer.Stop()
	}
}

// batchStart is where a batch in flight began, for OnPublished.
type batchStart struct {
	first uint64
	at    time.Time
}

// send publishes a batch into the window, each message expecting the
// previous position as the stream's last sequence (I2), awaiting the
// oldest acknowledgement whenever Window messages are in flight.
func (fl *flight) send(ctx context.Context, events []event.Event) error {
	if fl.batch != nil && asBatch(len(events), fl.r.p.cfg.BatchSize) {
		return fl.sendBatch(ctx, events)
	}
	p := fl.r.p
	fl.ends = append(fl.ends, events[len(events)-1].Position)
	fl.starts = append(fl.starts, batchStart{first: events[0].Position, at: time.Now()})
	for i := range events {
		e := &events[i]
		if e.Position != events[0].Position+uint64(i) {
			return fmt.Errorf("store returned position %d at index %d of a batch from %d: a gap in the store",
				e.Position, i, events[0].Position)
		}
		if err := fl.settle(ctx, p.cfg.Window-1); err != nil {
			return err
		}
		msg, err := stream.Message(e, p.cfg.MsgID)
		if err != nil {
			return err
		}
		f, err := p.cfg.JS.PublishMsgAsync(msg, jetstream.WithExpectLastSequence(e.Position-1),
			jetstream.WithStallWait(p.cfg.AckTimeout))
		if err != nil {
			return publishError(e, msg, err)
		}
		fl.futures = append(fl.futures, f)
		fl.positions = append(fl.positions, e.Position)
	}
	return nil
}

// settle awaits acknowledgements, oldest first, until at most keep
// messages are in flight. Each batch whose last message is acknowledged is
// checkpointed then, after the AfterAck hook.
func (fl *flight) settle(ctx context.Context, keep int) error {
	_, err := fl.settleOrWake(ctx, keep, nil)
	return err
}

// settleOrWake is settle that also returns, woken, as soon as a wake-up
// arrives on wake (nil: never) while it waits; what is still in flight
// stays there, unawaited, with its batches not yet checkpointed.
func (fl *flight) settleOrWake(ctx context.Context, keep int, wake <-chan struct{}) (woken bool, err error) {
	r := fl.r
	i := 0
	defer func() {
		// Drop what was awaited; the slices' arrays are reused.
		n := copy(fl.futures, fl.futures[i:])
		clear(fl.futures[n:])
		fl.futures = fl.futures[:n]
		fl.positions = fl.positions[:copy(fl.positions, fl.positions[i:])]
	}()
	for ; len(fl.futures)-i > keep; i++ {
		pos := fl.positions[i]
		if err := r.await(ctx, fl.futures[i], pos, wake, fl.ackDeadline(r.p.cfg.AckTimeout)); err != nil {
			if errors.Is(err, errWoken) {
				return true, nil // the future i is not consumed
			}
			i++
			return false, err
		}
		if len(fl.ends) == 0 || pos != fl.ends[0] {
			continue
		}
		fl.ends = fl.ends[1:]
		start := fl.starts[0]
		fl.starts = fl.starts[1:]
		if err := fl.acked(start.first, pos, start.at, false); err != nil {
			i++
			return false, err
		}
	}
	return false, nil
}

// acked records a batch from first to last, sent from at on (as one
// fast-ingest batch when fast), as wholly acknowledged, and hands its
// checkpoint to the checkpointer (after the AfterAck hook). An earlier
// checkpoint that failed (a lost lease) is returned: the run stops here
// rather than after another batch.
func (fl *flight) acked(first, last uint64, at time.Time, fast bool) error {
	r := fl.r
	r.published(first, last, time.Since(at), fast)
	r.acked = last
	r.drifting = false
	r.p.markProgress()
	r.p.setState(status.StateLeading, "publishing", nil)
	if r.p.cfg.AfterAck != nil {
		r.p.cfg.AfterAck(last)
	}
	fl.ck.save(last)
	select {
	case <-fl.ck.failed:
		return fl.ck.failure()
	default:
		return nil
	}
}

// errWoken is await's answer when a wake-up came before the acknowledgement.
var errWoken = errors.New("woken")

// await waits for the acknowledgement of the message at pos, or for a
// wake-up on wake (nil: none), which returns errWoken and leaves f
// unconsumed; timeout fires after the ack timeout.
func (r *run) await(ctx context.Context, f jetstream.PubAckFuture, pos uint64, wake <-chan struct{}, timeout <-chan time.Time) error {
	select {
	case <-wake:
		return errWoken
	case ack := <-f.Ok():
		if name := stream.Name(r.p.cfg.Boundary); ack.Stream != name {
			return &otherStreamError{pos: pos, got: ack.Stream, stream: name}
		}
		if ack.Sequence != pos {
			return fmt.Errorf("position %d acknowledged at stream sequence %d (duplicate: %v): refusing to continue out of place",
				pos, ack.Sequence, ack.Duplicate)
		}
		return nil
	case err := <-f.Err():
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && wrongLastSequence(apiErr) {
			return fmt.Errorf("publish position %d refused: the stream's last sequence is not %d (another publisher, or the stream changed): %w",
				pos, pos-1, err)
		}
		return fmt.Errorf("publish position %d: %w", pos, err)
	case <-timeout:
		return fmt.Errorf("publish position %d: no acknowledgement within %s", pos, r.p.cfg.AckTimeout)
	case <-ctx.Done():
		return fmt.Errorf("publish position %d: %w", pos, ctx.Err())
	}
}

// headerSize is roughly what the headers add to a message on the wire.
func headerSize(h nats.Header) int {
	n := 12
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
