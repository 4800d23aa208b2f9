package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/stream"
)

// rawPublish publishes the backlog's messages again, pipelined, into a
// fresh memory stream on the node's own server: the same subject shape,
// headers (with the expected last sequence) and body size, with the node's
// publish window, from a connection like the publisher's.
func (r *runner) rawPublish(ctx context.Context) error {
	cfg := r.node.Config()
	window := cfg.PublishWindow
	r.progress("limit: raw pipelined JetStream publishes of %d messages, window %d", r.cfg.Events, window)
	nc, err := r.node.ConnectNATS("orisun-bench-raw")
	if err != nil {
		return fmt.Errorf("bench: raw publish: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(window*2, 4000)))
	if err != nil {
		return fmt.Errorf("bench: raw publish: %w", err)
	}
	const name = "bench_rawpub" // never a stored boundary: the node leaves its stream alone
	epoch := event.NewID()
	scfg := stream.Config(name, epoch, stream.Limits{MaxBytes: cfg.EventStreamMaxBytes, MaxMsgs: cfg.EventStreamMaxMsgs,
		MaxAge: max(cfg.EventStreamMaxAge, 0)}, 1)
	if _, err := js.CreateStream(ctx, scfg); err != nil {
		return fmt.Errorf("bench: raw publish: create stream: %w", err)
	}
	defer js.DeleteStream(context.Background(), scfg.Name)
	// One event's body, as the publisher encodes it; the server never
	// looks into bodies, so every message carries the same one.
	proto := event.Event{ID: event.NewID(), Boundary: name, Epoch: epoch, Position: uint64(r.cfg.Events), Type: "bench.event",
		Time: time.Now().UTC(), Tags: []string{"bench"}, Data: r.data}
	body, err := stream.Body(&proto)
	if err != nil {
		return fmt.Errorf("bench: raw publish: %w", err)
	}
	subject := stream.Subject(name, proto.Type)
	ts := proto.Time.Format(time.RFC3339Nano)
	msgID := cfg.MsgID
	futures := make([]jetstream.PubAckFuture, window)
	var acked int64
	await := func(f jetstream.PubAckFuture, pos uint64) error {
		select {
		case ack := <-f.Ok():
			if ack.Sequence != pos {
				return fmt.Errorf("bench: raw publish: position %d acknowledged at %d", pos, ack.Sequence)
			}
			acked++
			return nil
		case err := <-f.Err():
			return fmt.Errorf("bench: raw publish: position %d: %w", pos, err)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("bench: raw publish: position %d: no acknowledgement in 30s", pos)
		}
	}
	m := startMeter()
	defer m.finish()
	n := uint64(r.cfg.Events)
	for pos := uint64(1); pos <= n; pos++ {
		if pos > uint64(window) {
			if err := await(futures[pos%uint64(window)], pos-uint64(window)); err != nil {
				return err
			}
		}
		id := event.NewID()
		msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{
			stream.HeaderEventID:  {id},
			stream.HeaderPosition: {strconv.FormatUint(pos, 10)},
			stream.HeaderEpoch:    {epoch},
			stream.HeaderType:     {proto.Type},
			stream.HeaderTime:     {ts},
		}}
		if msgID {
			msg.Header[nats.MsgIdHdr] = []string{id}
		}
		f, err := js.PublishMsgAsync(msg, jetstream.WithExpectLastSequence(pos-1), jetstream.WithStallWait(30*time.Second))
		if err != nil {
			return fmt.Errorf("bench: raw publish: position %d: %w", pos, err)
		}
		futures[pos%uint64(window)] = f
	}
	for pos := n - min(n, uint64(window)) + 1; pos <= n; pos++ {
		if err := await(futures[pos%uint64(window)], pos); err != nil {
			return err
		}
	}
	row := m.row("limit", "raw_publish", int64(n), r.cfg.EventBytes)
	row.StreamBytes = streamBytes(ctx, js)
	row.Note = fmt.Sprintf("PublishMsgAsync of the same subject, headers (Nats-Msg-Id %v, expected last sequence) and %d-byte body, window %d, into a fresh memory stream on the node's server",
		msgID, len(body), window)
	r.rep.Limits = append(r.rep.Limits, row)
	r.rep.check("raw publish acknowledged = backlog", int64(n), acked)
	// The relay's figure is compared with raw_relay (set with the row),
	// and also with the limits of its two halves.
	for i := range r.rep.Rows {
		if r.rep.Rows[i].Workload == "relay" {
			r.rep.Rows[i].also(r.rep.Limit("raw_publish"))
			r.rep.Rows[i].also(r.rep.Limit("raw_read"))
		}
	}
	return r.checkPublished(ctx, relayBoundary, int64(r.cfg.Events), "relay")
}

// checkPublished records that the boundary's checkpoint and stream reached
// its head and that the head is what was appended.
func (r *runner) checkPublished(ctx context.Context, boundary string, appended int64, what string) error {
	st, err := r.node.Status(ctx)
	if err != nil {
		return fmt.Errorf("bench: status: %w", err)
	}
	for _, b := range st.Boundaries {
		if b.Name == boundary {
			r.rep.check(what+": head = events appended", appended, int64(b.Head))
			r.rep.check(what+": events published = events appended", appended, int64(b.Published))
			r.rep.check(what+": stream last sequence = events appended", appended, int64(b.StreamLast))
			return nil
		}
	}
	return fmt.Errorf("bench: status has no boundary %s", boundary)
}

// catchup subscribes from 0 over the backlog and times the delivery of
// every event: all of it comes from the store (the catch-up reads until a
// page is short, which happens only at the head).
func (r *runner) catchup(ctx context.Context) error {
	r.progress("catch-up: a subscriber from 0 over %d events", r.cfg.Events)
	n := uint64(r.cfg.Events)
	var got atomic.Uint64
	var order error
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := r.watchdog(sctx, cancel, "catch-up", func() uint64 { return got.Load() })
	defer stop()
	m := startMeter()
	defer m.finish()
	err := r.node.Subscribe(sctx, relayBoundary, 0, func(_ context.Context, e orisun.Event) error {
		k := got.Add(1)
		if e.Position != k && order == nil {
			order = fmt.Errorf("bench: catch-up: event %d has position %d", k, e.Position)
		}
		if k == n {
			m.finish()
			cancel(nil)
		}
		return nil
	}, orisun.SubscribeOptions{})
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("bench: catch-up: %w", err)
	}
	if order != nil {
		return order
	}
	row := m.row("catchup", "subscriber from 0", int64(got.Load()), r.cfg.EventBytes)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.against(r.rep.Limit("raw_read"))
	r.rep.Rows = append(r.rep.Rows, row)
	r.rep.check("catch-up: events received = events appended", int64(n), int64(got.Load()))
	return nil
}

// appendShape is a row of an append workload: its name, its callers and
// the events of each of their calls.
type appendShape struct {
	name           string
	callers, batch int
	// boundaries, when more than one, spreads the callers over that
	// many boundaries (caller i to boundary i mod boundaries).
	boundaries int
}

// appendShapes are the rows of an append workload (appends, and the api
// workload's): one event per call at each count of callers, then batch.
func appendShapes(callers []int, batch appendShape) []appendShape {
	var shapes []appendShape
	for _, c := range callers {
		shapes = append(shapes, appendShape{name: fmt.Sprintf("1 event per call, %d callers", c), callers: c, batch: 1})
	}
	return append(shapes, batch)
}

// appends runs the single-event rows at each caller count, then batches of
// 100 from one caller, each on a fresh boundary for the append duration.
func (r *runner) appends(ctx context.Context) error {
	shapes := appendShapes(r.cfg.Callers, appendShape{name: "batches of 100, 1 caller", callers: 1, batch: 100})
	for i, s := range shapes {
		boundary := fmt.Sprintf("bench_append_%d", i)
		if _, err := r.node.CreateBoundary(ctx, boundary); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		r.progress("append: %s for %s", s.name, r.cfg.AppendDuration)
		var n atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, s.callers)
		cp := r.pgCheckpoints(ctx)
		m := startMeter()
		defer m.finish()
		deadline := time.Now().Add(r.cfg.AppendDuration)
		for range s.callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if _, err := r.node.Append(ctx, boundary, r.inputs(s.batch), nil); err != nil {
						errs <- fmt.Errorf("bench: append: %w", err)
						return
					}
					n.Add(int64(s.batch))
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		row := m.row("append", s.name, n.Load(), r.cfg.EventBytes)
		r.noteCheckpoints(ctx, &row, cp)
		row.StreamBytes = streamBytes(ctx, r.js)
		row.against(r.rep.Limit("raw_insert"))
		r.rep.Rows = append(r.rep.Rows, row)
		// The relay of these events is not part of the next row.
		if _, err := r.waitPublished(ctx, boundary, uint64(n.Load()), 10*time.Minute); err != nil {
			return err
		}
		if err := r.checkPublished(ctx, boundary, n.Load(), "append "+s.name); err != nil {
			return err
		}
	}
	return nil
}

// latency appends single events at a fixed rate on a fresh boundary with a
// live subscriber, and measures from each Append call to its delivery.
func (r *runner) latency(ctx context.Context, rate int) error {
	boundary := fmt.Sprintf("bench_latency_%d", rate)
	if _, err := r.node.CreateBoundary(ctx, boundary); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.progress("latency: %d events/s for %s", rate, r.cfg.LatencyDuration)
	row, res, err := r.latencyRow(ctx, nodeAPI{r.node}, boundary, rate, "latency", fmt.Sprintf("%d events/s", rate))
	if err != nil {
		return err
	}
	// Every event was delivered; once its publisher has checkpointed them
	// too, the count of those published in fast-ingest batches is final.
	if _, err := r.waitPublished(ctx, boundary, uint64(res.appended), 10*time.Minute); err != nil {
		return err
	}
	row.FastBatchEvents = r.fastBatchEvents(ctx, boundary)
	r.rep.Rows = append(r.rep.Rows, row)
	r.rep.check(fmt.Sprintf("latency %d/s: events received = events appended", rate), res.appended, res.received)
	return nil
}

// latencyRow drives boundary through api at rate for the latency duration
// (paced) and returns its row, named workload and name, with what the
// latency rows driven from this process (latency, outbox's enqueue
// latency) report: the meter's figures, PostgreSQL's checkpoints meanwhile
// (the server settled first: beforePaced), the stream's bytes, the target
// rate, the latencies and their ratios to raw_e2e at the rate. The paced
// result is the caller's to check.
func (r *runner) latencyRow(ctx context.Context, api eventAPI, boundary string, rate int, workload, name string) (Row, *pacedResult, error) {
	cp := r.beforePaced(ctx)
	m := startMeter()
	defer m.finish()
	res, err := paced(ctx, api, r.data, []string{boundary}, rate, r.cfg.LatencyDuration)
	if err != nil {
		return Row{}, nil, err
	}
	row := m.row(workload, name, res.appended, r.cfg.EventBytes)
	r.noteCheckpoints(ctx, &row, cp)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.TargetRate = rate
	res.fill(&row)
	compareE2E(&row, r.rep.Limit(rawE2EName(rate)))
	return row, res, nil
}

// compareE2E compares a latency row with raw_e2e at its rate (nil: not
// measured).
func compareE2E(row *Row, lim *Row) {
	if lim == nil || lim.P99Ms <= 0 || lim.P999Ms <= 0 {
		return
	}
	row.Limit = lim.Name
	row.P99Ratio = row.P99Ms / lim.P99Ms
	row.P999Ratio = row.P999Ms / lim.P999Ms
}

// pacedResult is what paced measured.
type pacedResult struct {
	// lat is from each event's scheduled time to its delivery, calls the
	// Append calls alone, after from each call's return to the delivery.
	lat, calls, after  []time.Duration
	appended, received int64
	// fallBacks counts live subscriptions sent back to the store.
	fallBacks atomic.Int64
	reasons   sync.Map // reason → struct{}
	sending   time.Duration
}

// targetShare is the share of the target rate a paced row must reach to
// stand unmarked: below it, appends queued behind the callers, and the
// latencies (measured from each event's scheduled time) are mostly that
// queue, not the relay.
const targetShare = 0.9

// fill sets the row's latencies and rate; row.TargetRate must be set.
func (p *pacedResult) fill(row *Row) {
	slices.Sort(p.lat)
	row.P50Ms = percentile(p.lat, 0.50)
	row.P99Ms = percentile(p.lat, 0.99)
	row.P999Ms = percentile(p.lat, 0.999)
	slices.Sort(p.calls)
	row.AppendP50Ms = percentile(p.calls, 0.50)
	row.AppendP99Ms = percentile(p.calls, 0.99)
	slices.Sort(p.after)
	row.AfterP50Ms = percentile(p.after, 0.50)
	row.AfterP99Ms = percentile(p.after, 0.99)
	// The rate reached is over the sending phase, not the drain after it.
	if p.sending > 0 {
		row.EventsPerSec = float64(p.appended) / p.sending.Seconds()
		row.MBPerSec = 0
	}
	row.Note = fmt.Sprintf("%d latencies measured from each event's scheduled time (queueing included); events/s is the rate reached while sending", len(p.lat))
	if row.TargetRate > 0 && row.EventsPerSec < targetShare*float64(row.TargetRate) {
		row.TargetNotReached = true
		row.Note = fmt.Sprintf("target not reached: %.0f events/s of the %d asked (below %.0f%%), the latencies include the queue of scheduled appends; %s",
			row.EventsPerSec, row.TargetRate, targetShare*100, row.Note)
	}
	if n := p.fallBacks.Load(); n > 0 {
		var reasons []string
		p.reasons.Range(func(k, _ any) bool { reasons = append(reasons, k.(string)); return len(reasons) < 3 })
		row.Note += fmt.Sprintf("; the live subscription went back to the store %d times (%s)", n, strings.Join(reasons, "; "))
	}
}

// eventAPI is what the paced rows drive: the node in process, or the Go
// client in the api workload's client process.
type eventAPI interface {
	Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error)
	Subscribe(ctx context.Context, boundary string, after uint64, h event.Handler, opts event.SubscribeOptions) error
	// Head is the boundary's head.
	Head(ctx context.Context, boundary string) (uint64, error)
}

// nodeAPI is the node in process as an eventAPI.
type nodeAPI struct{ *orisun.Node }

func (n nodeAPI) Head(ctx context.Context, boundary string) (uint64, error) {
	b, err := n.Boundary(ctx, boundary)
	return b.Head, err
}

func (r *runner) paced(ctx context.Context, boundaries []string, rate int, d time.Duration) (*pacedResult, error) {
	return paced(ctx, nodeAPI{r.node}, r.data, boundaries, rate, d)
}

// paced drives each boundary at rate events/s for d, one event of data per
// Append call, with a live subscriber per boundary, and returns the
// latencies from each event's scheduled time (start + k/rate) to its
// delivery: an append that waits for a free caller counts its wait, as a
// client's would. The Append calls alone are timed too (calls).
//
// Its own bookkeeping runs in the process it measures (the node's, or the
// api workload's client), so it is kept light, as raw_e2e's is: times go
// into slices indexed by the event's number k, as nanoseconds (no
// pointers for the collector to scan), and only the events in flight are
// in a map, id → k. Three sync.Maps that held every event's times were
// scanned by every collection: in the client process at 5,000 events/s
// the collector's background marking took 1.06 s of its 6.09 s of CPU
// with them and 0.16 s of 4.68 s without (docs/performance.md, "The live
// path at 5,000 events/s").
func paced(ctx context.Context, api eventAPI, data []byte, boundaries []string, rate int, d time.Duration) (*pacedResult, error) {
	res := &pacedResult{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	total := int(float64(rate) * d.Seconds())
	// Times are kept as nanoseconds since base (monotonic).
	base := time.Now()
	type subState struct {
		mu       sync.Mutex
		sent     map[string]int // event id → k, while its delivery is awaited
		returned []int64        // k → when its Append call returned (ns since base; 0: it did not)
		arrived  []int64        // k → when it was delivered (ns since base; 0: it was not)
		received atomic.Int64
		head     atomic.Uint64 // set once sending is over
		done     chan struct{}
		doneOnce sync.Once
		err      chan error
	}
	subs := make([]*subState, len(boundaries))
	for i, b := range boundaries {
		s := &subState{sent: make(map[string]int, 1024), returned: make([]int64, total), arrived: make([]int64, total),
			done: make(chan struct{}), err: make(chan error, 1)}
		subs[i] = s
		live := make(chan struct{})
		var liveOnce sync.Once
		go func() {
			s.err <- api.Subscribe(sctx, b, 0, func(_ context.Context, e event.Event) error {
				now := int64(time.Since(base))
				s.mu.Lock()
				k, ok := s.sent[e.ID]
				delete(s.sent, e.ID)
				s.mu.Unlock()
				if ok {
					s.arrived[k] = max(now, 1)
				}
				if h := s.head.Load(); uint64(s.received.Add(1)) >= h && h > 0 {
					s.doneOnce.Do(func() { close(s.done) })
				}
				return nil
			}, event.SubscribeOptions{
				OnCaughtUp: func(uint64) { liveOnce.Do(func() { close(live) }) },
				OnFellBehind: func(_ uint64, reason string) {
					res.fallBacks.Add(1)
					res.reasons.Store(reason, struct{}{})
				},
			})
		}()
		select {
		case <-live:
		case err := <-s.err:
			return nil, fmt.Errorf("bench: subscribe %s: %w", b, err)
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("bench: subscription to %s not live after a minute", b)
		}
	}
	workers := min(max(rate/20, 4), 256)
	var callsMu sync.Mutex
	var wg sync.WaitGroup
	var appended atomic.Int64
	errs := make(chan error, len(boundaries)*workers)
	start := time.Now()
	// due is when event k is scheduled, in ns since base.
	due := func(k int) int64 {
		return int64(start.Sub(base)) + int64(float64(k)*float64(time.Second)/float64(rate))
	}
	for i, b := range boundaries {
		s := subs[i]
		// Each job is the number k of the event due.
		jobs := make(chan int, rate+1)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := []event.Input{{Type: "bench.event", Data: data, Tags: []string{"bench"}}}
				var calls []time.Duration
				defer func() {
					callsMu.Lock()
					res.calls = append(res.calls, calls...)
					callsMu.Unlock()
				}()
				for k := range jobs {
					in[0].ID = event.NewID()
					s.mu.Lock()
					s.sent[in[0].ID] = k
					s.mu.Unlock()
					t0 := time.Now()
					_, err := api.Append(ctx, b, in, nil)
					back := time.Now()
					calls = append(calls, back.Sub(t0))
					if err != nil {
						s.mu.Lock()
						delete(s.sent, in[0].ID)
						s.mu.Unlock()
						select {
						case errs <- fmt.Errorf("bench: append to %s: %w", b, err):
						default:
						}
						continue // keep taking jobs, so the pacer never blocks
					}
					s.returned[k] = max(int64(back.Sub(base)), 1)
					appended.Add(1)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(jobs)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			queued := 0
			for queued < total {
				<-tick.C
				now := min(int(float64(rate)*time.Since(start).Seconds()), total)
				for ; queued < now; queued++ {
					select {
					case jobs <- queued:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	res.sending = time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	res.appended = appended.Load()
	for i, b := range boundaries {
		s := subs[i]
		head, err := api.Head(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		s.head.Store(head)
		if uint64(s.received.Load()) >= head {
			s.doneOnce.Do(func() { close(s.done) })
		}
		select {
		case <-s.done:
		case err := <-s.err:
			return nil, fmt.Errorf("bench: subscription to %s ended: %w", b, err)
		case <-time.After(5 * time.Minute):
			return nil, fmt.Errorf("bench: %s: %d of %d events delivered after 5 minutes", b, s.received.Load(), head)
		}
	}
	cancel()
	for i := range subs {
		s := subs[i]
		<-s.err // the handler has returned: its slice is ours
		res.received += s.received.Load()
		for k, at := range s.arrived {
			if at == 0 {
				continue
			}
			res.lat = append(res.lat, time.Duration(at-due(k)))
			if back := s.returned[k]; back != 0 {
				res.after = append(res.after, max(time.Duration(at-back), 0))
			}
		}
	}
	return res, nil
}

// scaleWait bounds the wait for every scale boundary to lead.
var scaleWait = 5 * time.Minute

// scale creates many boundaries, measures the node idle with all of them,
// then drives a few at a modest rate and measures their latency.
func (r *runner) scale(ctx context.Context) error {
	n := r.cfg.ScaleBoundaries
	r.progress("scale: creating %d boundaries", n)
	names := make([]string, n)
	m := startMeter()
	defer m.finish()
	for i := range names {
		names[i] = fmt.Sprintf("bench_scale_%05d", i)
		if _, err := r.node.CreateBoundary(ctx, names[i]); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	// Every publisher leads, its stream exists, and it has found nothing
	// to publish.
	var statusTime time.Duration
	deadline := time.Now().Add(scaleWait)
	for {
		t0 := time.Now()
		st, err := r.node.Status(ctx)
		statusTime = time.Since(t0)
		if err != nil {
			return fmt.Errorf("bench: status: %w", err)
		}
		leading := 0
		other := ""
		for _, b := range st.Boundaries {
			if !strings.HasPrefix(b.Name, "bench_scale_") {
				continue
			}
			if b.State == "leading" && b.Reason != "publishing" {
				leading++
			} else {
				other = fmt.Sprintf("%s is %s: %s", b.Name, b.State, b.Reason)
			}
		}
		if leading >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: scale: %d of %d boundaries leading and idle after %s (e.g. %s)", leading, n, scaleWait, other)
		}
		time.Sleep(time.Second)
	}
	row := m.row("scale", fmt.Sprintf("create %d boundaries until all lead", n), 0, 0)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.Note = fmt.Sprintf("one Node.Status call over all boundaries took %.0f ms", statusTime.Seconds()*1000)
	r.rep.Rows = append(r.rep.Rows, row)
	r.progress("scale: idle for %s", r.cfg.ScaleIdle)
	select {
	case <-time.After(2 * time.Second): // let the creation's after-effects pass
	case <-ctx.Done():
		return ctx.Err()
	}
	m = startMeter()
	defer m.finish()
	select {
	case <-time.After(r.cfg.ScaleIdle):
	case <-ctx.Done():
		return ctx.Err()
	}
	row = m.row("scale", fmt.Sprintf("idle, %d boundaries", n), 0, 0)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.Note = "cores = CPU seconds per wall second of the whole process while every boundary is idle; RSS includes every earlier workload's streams"
	r.rep.Rows = append(r.rep.Rows, row)
	if r.cfg.ScaleBusy == 0 {
		return nil
	}
	busy := names[:r.cfg.ScaleBusy]
	r.progress("scale: %d busy boundaries at %d events/s each for %s", len(busy), r.cfg.ScaleRate, r.cfg.LatencyDuration)
	m = startMeter()
	defer m.finish()
	res, err := r.paced(ctx, busy, r.cfg.ScaleRate, r.cfg.LatencyDuration)
	if err != nil {
		return err
	}
	row = m.row("scale", fmt.Sprintf("%d busy of %d, %d events/s each", len(busy), n, r.cfg.ScaleRate), res.appended, r.cfg.EventBytes)
	row.StreamBytes = streamBytes(ctx, r.js)
	row.TargetRate = r.cfg.ScaleRate * len(busy)
	res.fill(&row)
	r.rep.Rows = append(r.rep.Rows, row)
	r.rep.check("scale: events received = events appended", res.appended, res.received)
	return nil
}

// stall is how long a workload may make no progress before the run fails.
var stall = 2 * time.Minute

// watchdog cancels ctx with an error when progress() has not moved for
// stall. It returns a function that stops it.
func (r *runner) watchdog(ctx context.Context, cancel context.CancelCauseFunc, what string, progress func() uint64) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, since := progress(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if p := progress(); p != last {
					last, since = p, time.Now()
				} else if time.Since(since) > stall {
					cancel(fmt.Errorf("bench: %s: no progress for %s at %d events", what, stall, p))
					return
				}
			}
		}
	}()
	return func() { close(done) }
}
