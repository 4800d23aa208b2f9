package publisher_test

// Tests of the fast-ingest batches' details (batch.go): the smallest page
// sent as a batch, a batch id of its own per batch, the acknowledgement
// timeout counted from the last progress, and a refusal that stops the
// sending. Those that need the server's answers held or a message refused
// at a chosen place put a wire (wire_test.go) on the publisher's
// connection.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/stream"
)

// TestSmallFullPagesGoWithoutBatches: a full page of fewer than 32
// events goes as single publishes, not as a batch (for small pages the
// wait for the commit between pages costs more than the acknowledgements
// it saves: batch.go, batchMin); a full page of 32 goes as a batch.
func TestSmallFullPagesGoWithoutBatches(t *testing.T) {
	for _, c := range []struct {
		page    int
		batches uint64
	}{{2, 0}, {31, 0}, {32, 10}} {
		t.Run(strconv.Itoa(c.page), func(t *testing.T) {
			e := setup(t)
			n := uint64(10 * c.page)
			e.append(t, int(n))
			p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: c.page, Window: 8,
				PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
			stop := run(t, p, e.lease(t))
			testutil.Eventually(t, "the checkpoint at the head", 30*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == n })
			stopped(t, stop)
			if got := publisher.BatchesSent(p); got != c.batches {
				t.Fatalf("%d of the 10 full pages of %d went as one batch, want %d", got, c.page, c.batches)
			}
			e.wantStreamLast(t, n)
		})
	}
}

// TestLivePagesOfLiveBatchMinGoAsBatches_I2_I3: a page short of a full one
// (live traffic: the appends after the checkpoint, fewer than BatchSize)
// goes as one batch when it holds liveBatchMin (100) events or more, and
// as single publishes below that, 32 to 99 included; every message lands
// at its position (I2) and the checkpoint follows each page (I3). Each
// append is awaited to its checkpoint before the next, so that each page
// is one append.
func TestLivePagesOfLiveBatchMinGoAsBatches_I2_I3(t *testing.T) {
	e := setup(t)
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 1000, Window: 8,
		PollInterval: 20 * time.Millisecond, Wake: wake, Limits: stream.Limits{Batched: true}})
	stop := run(t, p, e.lease(t))
	var head uint64
	for _, c := range []struct {
		page    int
		batches uint64
	}{{100, 1}, {99, 1}, {40, 1}, {150, 2}, {1, 2}, {32, 2}} {
		e.append(t, c.page)
		poke(wake)
		head += uint64(c.page)
		e.waitCheckpoint(t, head, 30*time.Second)
		if got := publisher.BatchesSent(p); got != c.batches {
			t.Fatalf("after a live page of %d: %d pages went as one batch, want %d", c.page, got, c.batches)
		}
	}
	stopped(t, stop)
	e.wantStreamLast(t, head)
}

// TestLiveBatchAfterSinglesInFlight_I2_I3: a live page of liveBatchMin or
// more read while single publishes of the page before it are still
// unacknowledged waits for them: the singles are checkpointed first, then
// the batch, every message at its position (I2), each page reported once,
// in order (I3). The singles' PubAcks are held on the wire until the
// store has returned the page of 100, so that the batch meets them in
// flight whatever the timing.
func TestLiveBatchAfterSinglesInFlight_I2_I3(t *testing.T) {
	e := setup(t)
	release := make(chan struct{})
	var held atomic.Bool
	w := &wire{answer: func(f *frame) {
		// A single publish's PubAck; the JetStream API's answers (the
		// run's sync) begin with their type. Holding one holds every
		// frame after it on this connection, so the run's periodic
		// stream check is set out of the way (CheckInterval).
		if _, _, batch := fastBatch(f.subject); f.msg() && !batch && held.Load() && bytes.HasPrefix(f.body, []byte(`{"stream":`)) {
			<-release
		}
	}}
	_, js := wired(t, e.ns, "held acks", w)
	read100 := make(chan struct{})
	var once sync.Once
	store := &readWatch{Store: e.store, saw: func(evs []event.Event) {
		if len(evs) == 100 {
			once.Do(func() { close(read100) })
		}
	}}
	wake := make(chan struct{}, 1)
	var mu sync.Mutex
	type report struct {
		events int
		last   uint64
		fast   bool
	}
	var reports []report
	p := publisher.New(publisher.Config{Boundary: "b", Store: store, JS: js, BatchSize: 1000, Window: 64,
		PollInterval: 20 * time.Millisecond, CheckInterval: time.Hour, Wake: wake, Limits: stream.Limits{Batched: true},
		OnPublished: func(n int, last uint64, _ time.Duration, fast bool) {
			mu.Lock()
			reports = append(reports, report{n, last, fast})
			mu.Unlock()
		}})
	stop := run(t, p, e.lease(t))
	held.Store(true)
	e.append(t, 5)
	poke(wake)
	testutil.Eventually(t, "the 5 singles stored, their acknowledgements held", 10*time.Second, 5*time.Millisecond, func() bool {
		return e.streamLast() == 5
	})
	e.append(t, 100)
	poke(wake)
	select {
	case <-read100:
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher never read the page of 100")
	}
	if cp := e.checkpoint(); cp != 0 {
		t.Fatalf("checkpoint %d while every acknowledgement is held", cp)
	}
	close(release)
	e.waitCheckpoint(t, 105, 30*time.Second)
	stopped(t, stop)
	e.wantStreamLast(t, 105)
	if got := publisher.BatchesSent(p); got != 1 {
		t.Fatalf("%d pages went as one batch, want the page of 100", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []report{{5, 5, false}, {100, 105, true}}; !slices.Equal(reports, want) {
		t.Fatalf("published reports %+v, want %+v: the singles, then the batch", reports, want)
	}
}

// TestLiveBatchBeforeABadRow_I4: 120 good events before a bad row (a
// page short of a full one) are published as one batch and checkpointed;
// nothing at or past the row is published (I4).
func TestLiveBatchBeforeABadRow_I4(t *testing.T) {
	e := setup(t)
	e.append(t, 125)
	store := &readWatch{Store: e.store, bad: 121}
	p := publisher.New(publisher.Config{Boundary: "b", Store: store, JS: e.js, BatchSize: 1000, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 120, 30*time.Second)
	_ = stop() // the run ends in the bad row's error, or is stopped waiting at it
	e.wantStreamLast(t, 120)
	if got := publisher.BatchesSent(p); got != 1 {
		t.Fatalf("%d pages went as one batch, want the 120 events before the bad row", got)
	}
}

// readWatch is a store whose reads are shown to saw, and, with bad set,
// end before position bad with a corrupt row there (backend.Reader's
// contract for a bad row: the good events before it, and the error).
type readWatch struct {
	*sqlite.Store
	saw func([]event.Event)
	bad uint64
}

func (r *readWatch) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	epoch, evs, err := r.Store.Read(ctx, boundary, after, limit, q)
	if err == nil && r.bad > 0 {
		for i := range evs {
			if evs[i].Position == r.bad {
				evs, err = evs[:i], &event.CorruptError{Boundary: boundary, Position: r.bad, Column: "data", Reason: "a test's bad row"}
				break
			}
		}
	}
	if r.saw != nil {
		r.saw(evs)
	}
	return epoch, evs, err
}

// TestOpenBatchOfAnEarlierIDLeavesTheNextAlone_I2: the server knows an
// open batch by its id alone, and a batch's first message that meets an
// open batch of the same id is answered with a gap and ends that batch. A
// batch left open (its run stopped sending mid-batch: the node died, the
// run timed out) under an id a publisher used before must not meet the
// next leader's batch: every batch has an id of its own. (When ids counted
// from 1 per run, the next run's first batch met the last run's and was
// refused.)
func TestOpenBatchOfAnEarlierIDLeavesTheNextAlone_I2(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// The id of each batch, from its first message's reply subject, as a
	// subscriber on the stream's subjects sees it.
	ids := make(chan string, 16)
	sub, err := e.nc.Subscribe(stream.Subjects("b"), func(m *nats.Msg) {
		if id, n, ok := fastBatch(m.Reply); ok && n == 1 {
			ids <- id
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	newPublisher := func() *publisher.Publisher {
		return publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 100, Window: 8,
			PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
	}

	e.append(t, 100)
	p1 := newPublisher()
	stop := run(t, p1, e.lease(t))
	e.waitCheckpoint(t, 100, 30*time.Second)
	stopped(t, stop)
	if n := publisher.BatchesSent(p1); n != 1 {
		t.Fatalf("%d pages went as one batch, want the one page of 100", n)
	}
	var used string
	select {
	case used = <-ids:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber saw no batch")
	}

	// A batch of the id used above, open: positions 101 to 110 sent as
	// the start of a batch, as the publisher sends them, and stored; no
	// commit.
	e.append(t, 200)
	_, evs, err := e.store.Read(ctx, "b", 100, 10, nil)
	if err != nil || len(evs) != 10 {
		t.Fatalf("read 101..110: %d events, %v", len(evs), err)
	}
	inbox := nats.NewInbox()
	for i := range evs {
		m, err := stream.Message(&evs[i], false)
		if err != nil {
			t.Fatal(err)
		}
		m.Header[jetstream.ExpectedLastSeqHeader] = []string{strconv.FormatUint(evs[i].Position-1, 10)}
		m.Reply = fastIngestReply(inbox, used, i+1, 1000)
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the open batch's messages stored", 10*time.Second, 10*time.Millisecond, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.LastSeq == 110
	})

	// What the server answers on the next publisher's batches: no gap, no
	// error.
	var mu sync.Mutex
	var refusals []string
	answers, err := e.nc.Subscribe(natsembed.InternalInboxPrefix+".>", func(m *nats.Msg) {
		var r fastIngestReplyMsg
		if _, _, ok := fastBatch(m.Subject); ok && (json.Unmarshal(m.Data, &r) != nil || r.Type == "gap" || r.Error != nil) {
			mu.Lock()
			refusals = append(refusals, m.Subject+" "+string(m.Data))
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer answers.Unsubscribe()
	p2 := newPublisher()
	stop = run(t, p2, e.lease(t))
	e.waitCheckpoint(t, 300, 30*time.Second)
	stopped(t, stop)
	// The answers come before the commit's PubAck, hence before the
	// checkpoint: all are in.
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) > 0 {
		t.Fatalf("the next publisher's batches were answered with %d gaps or errors (its batch met the open one), the first: %q",
			len(refusals), refusals[:min(len(refusals), 2)])
	}
	if n := publisher.BatchesSent(p2); n != 1 {
		t.Fatalf("%d pages went as one batch, want the one full page, 111..210 (211..300, 90 events, is under liveBatchMin)", n)
	}
	e.wantStreamLast(t, 300)
}

// TestSlowBatchWithinAckTimeoutOfEachAnswer_I3: a batch whose answers
// (flow acknowledgements, the commit's PubAck) each come within
// AckTimeout of the one before is not abandoned, however long the whole
// batch takes: the timeout counts from the last progress.
//
// A wire on the publisher's connection hands it the batch's answers one
// at a time, each a step after the one before, and the acknowledgement
// timeout is 1.5 steps. A page of 1,500 gets four answers (the first
// message's, the acknowledgements of 500 and 1,000, the PubAck), so the
// batch takes at least four steps; the publisher sends its last message
// right after the second answer, and the PubAck comes at least two steps
// after that. A timer that starts once, or that no acknowledgement resets
// while sending or while awaiting the commit, fires before the PubAck; the
// test then sees no batch counted (the resync finds the messages stored).
// The only timing the test relies on is that a step of one second covers
// one answer's processing with 0.5 s to spare; the failure it looks for is
// bounded from below by the wire's waits. (At 1.8 steps, a publisher that
// reset the timer after its last message but not at the acknowledgements
// while awaiting the commit failed only by the 0.2 s less the sending's
// time; at 1.5, by half a step.)
func TestSlowBatchWithinAckTimeoutOfEachAnswer_I3(t *testing.T) {
	const step = time.Second
	e := setup(t)
	e.append(t, 1500)
	w := &wire{answer: func(f *frame) {
		if _, _, ok := fastBatch(f.subject); ok {
			time.Sleep(step)
		}
	}}
	_, js := wired(t, e.ns, "slow answers", w)
	var logs testutil.LogBuffer
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: js, BatchSize: 1500, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}, AckTimeout: step * 3 / 2,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 1500, 60*time.Second)
	stopped(t, stop)
	if n := publisher.BatchesSent(p); n != 1 {
		t.Fatalf("%d pages went as one batch, want the page of 1500 (abandoned while it progressed?); the publisher's log:\n%s", n, logs.String())
	}
	e.wantStreamLast(t, 1500)
}

// TestRefusalStopsTheBatch_I2: a message of a batch the server refuses
// ends the batch (it answers each later message as of a batch it does not
// know); the publisher, told of the refusal while it is still sending,
// sends no more of the batch than the message it was sending, and
// publishes the rest after its resync.
//
// A wire on the publisher's connection makes the server refuse the 50th
// message of the first batch (its expected last sequence is rewritten)
// and holds what the publisher writes after it until the publisher has
// read the refusal (its connection reads again only once it has
// delivered what it read), so the refusal is there when the publisher
// next looks: no race decides the outcome. The publisher writes nothing
// meanwhile (its writes hold the connection's lock). After that, it may
// finish the publish it was in; any more messages of the batch are ones it
// sent knowing of the refusal. Without the reads while sending, it sends
// the whole page of 600 (fewer than the two flow windows it may have
// unacknowledged).
func TestRefusalStopsTheBatch_I2(t *testing.T) {
	const refused = 50
	e := setup(t)
	e.append(t, 600)
	var (
		batch      atomic.Value // the first batch's id, a string
		heldWrite  int          // the write held at the message after the refused one
		release    = make(chan struct{})
		releaseOne sync.Once
		late       atomic.Int64 // messages of the batch in writes after the held one
		sentAfter  atomic.Int64 // messages of the batch after the refused one
	)
	w := &wire{}
	w.sent = func(f *frame) <-chan struct{} {
		// Called for one write at a time (the connection's lock).
		id, n, ok := fastBatch(f.reply)
		if !ok {
			return nil
		}
		if batch.CompareAndSwap(nil, id); batch.Load() != id {
			return nil
		}
		switch {
		case n == refused:
			// Its expected last sequence's last digit, changed: 49
			// becomes 40, and the server refuses the message.
			k := bytes.Index(f.hdr, []byte(jetstream.ExpectedLastSeqHeader+": "))
			if k < 0 {
				t.Errorf("message %d of the batch has no expected last sequence: %q", n, f.hdr)
				return nil
			}
			end := k + bytes.Index(f.hdr[k:], []byte("\r\n"))
			f.hdr[end-1] = '0' + (f.hdr[end-1]-'0'+1)%10
		case n > refused:
			sentAfter.Add(1)
			if heldWrite == 0 {
				heldWrite = f.write
				time.AfterFunc(30*time.Second, func() { releaseOne.Do(func() { close(release) }) })
				return release
			}
			if f.write > heldWrite {
				late.Add(1)
			}
		}
		return nil
	}
	var told atomic.Bool
	w.handled = func(f *frame) {
		if id, n, ok := fastBatch(f.subject); ok && id == batch.Load() && n == refused && bytes.Contains(f.body, []byte(`"error"`)) {
			told.Store(true)
			releaseOne.Do(func() { close(release) })
		}
	}
	_, js := wired(t, e.ns, "refused", w)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: js, BatchSize: 600, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 600, 60*time.Second)
	stopped(t, stop)
	if !told.Load() {
		t.Fatalf("the publisher never read a refusal of message %d of its batch (%d messages after it sent): the test refused nothing", refused, sentAfter.Load())
	}
	if n := late.Load(); n > 1 {
		t.Fatalf("after the refusal of message %d reached the publisher, it sent %d more messages of the batch (%d after the refused one in all), want at most the one it was sending",
			refused, n, sentAfter.Load())
	}
	t.Logf("%d messages of the batch after the refused one, %d of them after the refusal reached the publisher", sentAfter.Load(), late.Load())
	e.wantStreamLast(t, 600)
}
