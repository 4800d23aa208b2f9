package publisher_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/lease"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/publisher"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/stream"
)

type env struct {
	dir   string
	store *sqlite.Store
	ns    *natsembed.Server
	nc    *nats.Conn
	js    jetstream.JetStream
}

func setup(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store := storetest.SQLite(t, sqlite.Config{Dir: dir})
	ns := natstest.Server(t, natsembed.Config{})
	nc := natstest.Orisun(t, ns, "test")
	js := natstest.JetStream(t, nc)
	if _, _, err := store.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	return &env{dir: dir, store: store, ns: ns, nc: nc, js: js}
}

func (e *env) append(t testing.TB, n int) {
	t.Helper()
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`), Tags: []string{}}
	}
	if _, err := e.store.Append(context.Background(), "b", in, nil); err != nil {
		t.Fatal(err)
	}
}

// head reads the one boundary's head (backend.HeadReader).
func (e *env) head(t testing.TB) backend.Head {
	t.Helper()
	hs, err := e.store.Heads(context.Background())
	if err != nil || len(hs) != 1 {
		t.Fatalf("Heads = %+v, %v", hs, err)
	}
	return hs[0]
}

// lease takes the boundary's lease for node n, for a minute.
func (e *env) lease(t testing.TB) backend.Lease {
	t.Helper()
	l, err := e.store.AcquireLease(context.Background(), "b", "n", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkpoint is the boundary's stored checkpoint (0 when it cannot be
// read).
func (e *env) checkpoint() uint64 {
	cp, _ := e.store.Checkpoint(context.Background(), "b")
	return cp
}

// run runs p under the lease l in a goroutine until stop, which ends the
// run (cancels its context) and returns its result; the test's cleanup
// stops it too.
func run(t testing.TB, p *publisher.Publisher, l backend.Lease) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, l) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// stopped stops a run (run's stop) and fails the test if the run ended
// with an error.
func stopped(t testing.TB, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// publisher returns a publisher without Nats-Msg-Id, so that the server's
// de-duplication cannot mask a misplaced message: only the expected last
// sequence keeps the stream in order.
func (e *env) publisher(js jetstream.JetStream, wake chan struct{}) *publisher.Publisher {
	return publisher.New(publisher.Config{
		Boundary: "b", Store: e.store, JS: js, BatchSize: 50, Window: 8,
		PollInterval: 20 * time.Millisecond, Wake: wake, Limits: stream.Limits{Batched: true},
	})
}

// waitCheckpoint waits up to timeout for b's checkpoint to be at want.
func (e *env) waitCheckpoint(t testing.TB, want uint64, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("the checkpoint at %d", want), timeout, 10*time.Millisecond, func() bool { return e.checkpoint() == want })
}

// streamLast is b's stream's last sequence (0 before it exists).
func (e *env) streamLast() uint64 {
	s, err := e.js.Stream(context.Background(), stream.Name("b"))
	if err != nil {
		return 0
	}
	return s.CachedInfo().State.LastSeq
}

// poke wakes a publisher without blocking.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// wantStreamLast checks b's stream (checkStream) and that its last
// sequence is want.
func (e *env) wantStreamLast(t testing.TB, want uint64) {
	t.Helper()
	if last := e.checkStream(t); last != want {
		t.Fatalf("stream last %d, want %d", last, want)
	}
}

// checkStream asserts sequence = position = the store's event (I2) for the
// whole stream and returns its last sequence.
func (e *env) checkStream(t testing.TB) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get sequence %d: %v", seq, err)
		}
		pos, _ := strconv.ParseUint(m.Header.Get(stream.HeaderPosition), 10, 64)
		_, evs, err := e.store.Read(ctx, "b", seq-1, 1, nil)
		if err != nil || len(evs) != 1 {
			t.Fatalf("store read at %d: %v %v", seq, evs, err)
		}
		if pos != seq || m.Header.Get(stream.HeaderEventID) != evs[0].ID {
			t.Fatalf("sequence %d carries position %d, event %s; the store has %s there (I2)",
				seq, pos, m.Header.Get(stream.HeaderEventID), evs[0].ID)
		}
	}
	return info.State.LastSeq
}

// TestStalePublisherCannotMisplace_I6_I3: a publisher whose lease term is
// stale runs beside the current one while events are appended. Nothing it
// does places a message out of position (I2, I6), its checkpoint write is
// refused and it stops with ErrLeaseLost (I3), and the current publisher
// publishes everything.
func TestStalePublisherCannotMisplace_I6_I3(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	stale, current := e.deposed(t)

	// The stale publisher gets its own connection, as another node would.
	nc2 := natstest.Orisun(t, e.ns, "stale")
	js2, _ := jetstream.New(nc2)
	good := e.publisher(e.js, make(chan struct{}, 1))
	bad := e.publisher(js2, make(chan struct{}, 1))

	e.append(t, 100)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var goodErr, badErr error
	badDone := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); goodErr = good.Run(runCtx, current) }()
	go func() { defer wg.Done(); defer close(badDone); badErr = bad.Run(runCtx, stale) }()
	// Keep appending until the stale publisher has tried a checkpoint: it
	// only learns that its term is stale when it writes one (in a node, the
	// lease renewal tells it too).
	deadline := time.After(20 * time.Second)
appending:
	for i := 0; ; i++ {
		e.append(t, 1+i*7%23)
		select {
		case <-badDone:
			break appending
		case <-deadline:
			t.Fatal("the stale publisher did not stop")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !errors.Is(badErr, event.ErrLeaseLost) {
		t.Fatalf("stale publisher ended with %v, want ErrLeaseLost", badErr)
	}
	head := func() uint64 { b, _ := e.store.Boundary(ctx, "b"); return b.Head }
	testutil.Eventually(t, "the checkpoint to reach the head", 20*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == head() })
	cancel()
	wg.Wait()
	if goodErr != nil {
		t.Fatalf("current publisher: %v", goodErr)
	}
	if last := e.checkStream(t); last != head() {
		t.Fatalf("stream last %d, head %d", last, head())
	}

	// A message for an old position, sent as a stale node would, is refused
	// by JetStream itself.
	_, evs, _ := e.store.Read(ctx, "b", 4, 1, nil)
	msg, _ := stream.Message(&evs[0], false)
	_, err := js2.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(4))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("out-of-place publish: got %v, want wrong last sequence", err)
	}
}

// TestBacklogPublishedInBatches_I2_I3: a backlog's full pages go as one
// batch each, every message at its position (I2) and the checkpoint at
// the last acknowledged batch (I3); the short pages of live appends after
// it (3 events each, under liveBatchMin) go one message at a time, in the same
// stream.
func TestBacklogPublishedInBatches_I2_I3(t *testing.T) {
	e := setup(t)
	e.append(t, 1000)
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 100, Window: 8,
		PollInterval: 20 * time.Millisecond, Wake: wake, Limits: stream.Limits{Batched: true}})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 1000, 30*time.Second)
	if n := publisher.BatchesSent(p); n != 10 {
		t.Fatalf("%d pages went as one batch, want the 10 full pages of 100", n)
	}
	for range 5 {
		e.append(t, 3)
		poke(wake)
	}
	e.waitCheckpoint(t, 1015, 30*time.Second)
	stopped(t, stop)
	if n := publisher.BatchesSent(p); n != 10 {
		t.Fatalf("%d pages went as one batch after the live appends, want 10: short pages go one message at a time", n)
	}
	e.wantStreamLast(t, 1015)
}

// TestBacklogWithoutBatchesWhereNotAllowed_I2: a stream without
// allow_batched (a server older than 2.14, or streams without batches
// configured), or messages with Nats-Msg-Id, get single publishes: the
// same backlog is published whole, none of it as a batch.
func TestBacklogWithoutBatchesWhereNotAllowed_I2(t *testing.T) {
	for _, c := range []struct {
		name  string
		lim   stream.Limits
		msgID bool
	}{{"not allowed", stream.Limits{}, false}, {"Nats-Msg-Id", stream.Limits{Batched: true}, true}} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t)
			e.append(t, 300)
			p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 100, Window: 8,
				PollInterval: 20 * time.Millisecond, Limits: c.lim, MsgID: c.msgID})
			stop := run(t, p, e.lease(t))
			e.waitCheckpoint(t, 300, 30*time.Second)
			stopped(t, stop)
			if n := publisher.BatchesSent(p); n != 0 {
				t.Fatalf("%d pages went as one batch, want none", n)
			}
			e.wantStreamLast(t, 300)
		})
	}
}

// TestStopDuringBatchesCheckpointsWhatIsStored_I3: a publisher stopped in
// the middle of a backlog sent in batches finishes the batch it sent and
// leaves the checkpoint at the stream's last sequence, every message at
// its position; the next run resumes there.
func TestStopDuringBatchesCheckpointsWhatIsStored_I3(t *testing.T) {
	e := setup(t)
	e.append(t, 5000)
	acked := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 500, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true},
		AfterAck: func(uint64) {
			select {
			case acked <- struct{}{}:
			default:
			}
		}})
	stop := run(t, p, e.lease(t))
	<-acked
	stopped(t, stop)
	last := e.checkStream(t)
	if cp := e.checkpoint(); cp != last || last == 0 || last%500 != 0 {
		t.Fatalf("stopped mid-backlog: checkpoint %d, stream last %d; want them equal, at the end of a batch of 500", cp, last)
	}
	p2 := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 500, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
	stop2 := run(t, p2, e.lease(t))
	e.waitCheckpoint(t, 5000, 30*time.Second)
	stopped(t, stop2)
	e.wantStreamLast(t, 5000)
}

// TestForeignMessageDuringBatchNeverSkips_I2_I4: a message published into
// the stream by someone else (or by a stale publisher: the same refusal,
// I6) while a batch is being sent takes a sequence in the middle of it; the server refuses the batch's next message (it
// expects the previous position) and ends the batch, the publisher goes
// back to its checkpoint, and every position ends up at its own sequence.
// (Should a message go out without its expected last sequence, the batch's
// commit, acknowledged one sequence too far, is refused all the same and
// nothing of it is checkpointed; that the server checks every message of
// a batch is TestFastIngestChecksExpectedLastSequence's.)
func TestForeignMessageDuringBatchNeverSkips_I2_I4(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.append(t, 10000)
	var foreign atomic.Uint64
	var once atomic.Bool
	// At position 5100, early in the second batch (5001..10000): the
	// publisher is at most two flow windows (1,000 messages) ahead of what
	// the server has stored, so the foreign message lands inside it.
	sub, err := e.nc.Subscribe(stream.Subjects("b"), func(m *nats.Msg) {
		// Once: after the refusal the publisher publishes 5100 again.
		if m.Header.Get(stream.HeaderPosition) != "5100" || !once.CompareAndSwap(false, true) {
			return
		}
		ack, err := e.js.Publish(ctx, stream.Subject("b", "intruder"), []byte("x"))
		if err != nil {
			t.Error(err)
			return
		}
		foreign.Store(ack.Sequence)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 5000, Window: 8,
		PollInterval: 20 * time.Millisecond, Limits: stream.Limits{Batched: true}})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 10000, 60*time.Second)
	stopped(t, stop)
	if fs := foreign.Load(); fs <= 5100 || fs >= 10000 {
		t.Fatalf("the foreign message took sequence %d, not one inside the batch 5001..10000: the test did not refuse a batch midway", fs)
	}
	e.wantStreamLast(t, 10000)
	t.Logf("foreign message at sequence %d, inside the batch 5001..10000", foreign.Load())
}

// TestStreamAheadOfStoreStalls_I7: a stream whose last sequence is beyond the
// store's head (the store was restored) stops the publisher with that reason;
// it never guesses and never publishes.
func TestStreamAheadOfStoreStalls_I7(t *testing.T) {
	t.Run("orisun's configuration", func(t *testing.T) { streamAheadOfStoreStalls(t, nil) })
	// A setting JetStream cannot undo in place asks for the stream to be
	// recreated from the checkpoint: that must not erase the evidence
	// first.
	t.Run("a drift that asks for a recreate", func(t *testing.T) {
		streamAheadOfStoreStalls(t, func(c *jetstream.StreamConfig) { c.AllowMsgTTL = true })
	})
}

func streamAheadOfStoreStalls(t *testing.T, drift func(*jetstream.StreamConfig)) {
	e := setup(t)
	ctx := context.Background()
	b, _ := e.store.Boundary(ctx, "b")
	cfg := stream.Config("b", b.Epoch, stream.Limits{}, 1)
	if drift != nil {
		drift(&cfg)
	}
	if _, err := e.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Positions 1..5 of this epoch, as a store that later lost 4 and 5
	// (restored from a backup) would have had them published.
	for i := uint64(1); i <= 5; i++ {
		m, _ := stream.Message(&event.Event{ID: event.NewID(), Boundary: "b", Epoch: b.Epoch, Position: i, Type: "t",
			Time: time.Now(), Data: json.RawMessage(`{}`)}, false)
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	e.append(t, 3)
	p := e.publisher(e.js, nil)
	stop := run(t, p, e.lease(t))
	testutil.Eventually(t, "the stalled state", 5*time.Second, 10*time.Millisecond, func() bool {
		st := p.Status()
		return st.State == status.StateStalled && strings.Contains(st.Reason, "went back in time")
	})
	stopped(t, stop)
	if cp := e.checkpoint(); cp != 0 {
		t.Fatalf("checkpoint moved to %d", cp)
	}
}

// TestStreamOfOtherEpochIsRecreated_I2: a stream left from another epoch
// (the boundary was recreated) is deleted and recreated, so no message of
// the old epoch stays at a position of the new one.
func TestStreamOfOtherEpochIsRecreated_I2(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := stream.Config("b", "00000000-0000-0000-0000-000000000000", stream.Limits{}, 1)
	if _, err := e.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, stream.Subject("b", "t"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	e.append(t, 10)
	stop := run(t, e.publisher(e.js, nil), e.lease(t))
	e.waitCheckpoint(t, 10, 10*time.Second)
	stop()
	e.wantStreamLast(t, 10)
	s, _ := e.js.Stream(ctx, stream.Name("b"))
	b, _ := e.store.Boundary(ctx, "b")
	if got := stream.Epoch(&s.CachedInfo().Config); got != b.Epoch {
		t.Fatalf("stream epoch %s, boundary epoch %s", got, b.Epoch)
	}
}

// TestCleanStopCheckpoints_I3: a publisher stopped while it publishes
// finishes what it has in flight and leaves the checkpoint at the stream's last
// sequence, never beyond it.
func TestCleanStopCheckpoints_I3(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		e.append(t, 500)
	}
	stop := run(t, e.publisher(e.js, nil), e.lease(t))
	testutil.Eventually(t, "publishing under way", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() >= 1000 })
	stopped(t, stop)
	cp := e.checkpoint()
	s, _ := e.js.Stream(ctx, stream.Name("b"))
	last := s.CachedInfo().State.LastSeq
	if cp != last {
		t.Fatalf("after a clean stop the checkpoint is %d, the stream's last sequence %d", cp, last)
	}
	if cp == 10000 {
		t.Log("the publisher finished before the stop: the test did not stop mid-publishing")
	}
	e.checkStream(t)
}

// foreignMessage publishes a message into the boundary's stream behind the
// publisher's back (anyone can, until NATS has authentication), appends
// more events, and returns once the publisher has published them all.
func foreignMessage(t *testing.T, lim stream.Limits, after int) (*env, *publisher.Publisher) {
	t.Helper()
	e := setup(t)
	ctx := context.Background()
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: 20 * time.Millisecond, Wake: wake, Limits: lim})
	run(t, p, e.lease(t))
	e.append(t, 3)
	e.waitCheckpoint(t, 3, 10*time.Second)
	if _, err := e.js.Publish(ctx, stream.Subject("b", "intruder"), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	e.append(t, after)
	wake <- struct{}{}
	head := uint64(3 + after)
	testutil.Eventually(t, "the checkpoint at the head", 20*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == head })
	return e, p
}

// TestForeignMessageNeverSkips_I2_I4: a message published into the stream by
// someone else takes sequence 4, and pipelined events after it may be
// accepted in place; position 4 must not be skipped. The publisher proves
// the stream after its checkpoint, finds the foreign message and recreates
// the stream from the checkpoint, so 4.. are published at their sequences.
func TestForeignMessageNeverSkips_I2_I4(t *testing.T) {
	e, _ := foreignMessage(t, stream.Limits{}, 20)
	s, _ := e.js.Stream(context.Background(), stream.Name("b"))
	if first := s.CachedInfo().Config.FirstSeq; first != 4 {
		t.Fatalf("stream recreated with first sequence %d, want 4 (checkpoint 3 + 1)", first)
	}
	e.wantStreamLast(t, 23)
}

// TestForeignMessageEvictedNeverSkips_I2_I4: the same, with the foreign
// message pushed out of the stream by its size limit before the publisher
// looks: the range after the checkpoint cannot be proven, so the stream is
// recreated from the checkpoint rather than trusted.
func TestForeignMessageEvictedNeverSkips_I2_I4(t *testing.T) {
	e, _ := foreignMessage(t, stream.Limits{MaxMsgs: 3}, 20)
	s, _ := e.js.Stream(context.Background(), stream.Name("b"))
	if first := s.CachedInfo().Config.FirstSeq; first != 4 {
		t.Fatalf("stream recreated with first sequence %d, want 4 (checkpoint 3 + 1)", first)
	}
	e.checkStream(t)
}

// TestForeignMessageAgedOutNeverSkips_I2_I4: the same, with the foreign
// message gone by age while the publisher retried.
func TestForeignMessageAgedOutNeverSkips_I2_I4(t *testing.T) {
	e, _ := foreignMessage(t, stream.Limits{MaxAge: 300 * time.Millisecond}, 2)
	s, _ := e.js.Stream(context.Background(), stream.Name("b"))
	if first := s.CachedInfo().Config.FirstSeq; first != 4 {
		t.Fatalf("stream recreated with first sequence %d, want 4 (checkpoint 3 + 1)", first)
	}
}

// failingSaves is a real store whose checkpoint writes fail while fail is set,
// or, with every > 0, one write in every up to most failures: the disk
// full under a running publisher. saved, when set, is called before each
// write that goes through.
type failingSaves struct {
	*sqlite.Store
	fail   atomic.Bool
	every  int64
	most   int64
	saved  func(pos uint64)
	saves  atomic.Int64
	failed atomic.Int64
}

func (f *failingSaves) SaveCheckpoint(ctx context.Context, b string, l backend.Lease, pos uint64) error {
	n := f.saves.Add(1)
	if f.fail.Load() || (f.every > 0 && n%f.every == 0 && f.failed.Load() < f.most) {
		f.failed.Add(1)
		return event.ErrUnavailable
	}
	if f.saved != nil {
		f.saved(pos)
	}
	return f.Store.SaveCheckpoint(ctx, b, l, pos)
}

// TestCheckpointCatchesUpAfterFailedWrite_I3_I7: when a checkpoint write
// fails after JetStream acknowledged the batch, the resync writes the
// checkpoint of what the stream holds even if no new event comes, so the
// status does not report a lag that does not exist.
func TestCheckpointCatchesUpAfterFailedWrite_I3_I7(t *testing.T) {
	e := setup(t)
	e.append(t, 10)
	p := publisher.New(publisher.Config{Boundary: "b", Store: &failingSaves{Store: e.store, every: 1, most: 1}, JS: e.js,
		BatchSize: 50, PollInterval: 20 * time.Millisecond})
	stop := run(t, p, e.lease(t))
	testutil.Eventually(t, "the checkpoint at 10 with no new event", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 10 })
	stop()
	e.checkStream(t)
}

// TestDeposedPublisherDoesNotDeleteTheStream_I6: with a NATS shared by
// several nodes, a publisher whose lease term is no longer current must not
// delete, purge or recreate the stream the new leader publishes to. Here the
// stream holds another epoch (which a current leader would recreate) and a
// message; the deposed publisher renews the lease before deleting (refused: a newer term exists), ends
// with ErrLeaseLost, and the stream is untouched.
func TestDeposedPublisherDoesNotDeleteTheStream_I6(t *testing.T) {
	e := setup(t)
	stale, _ := e.deposed(t)
	e.foreignStream(t)
	e.refusedLeavingStream(t, stale, "the deposed publisher")
}

// TestDeposedPublisherDoesNotCreateTheStream_I6: the stream is missing
// (the new leader deleted it to recreate it, say); a publisher whose term
// is stale must not create it with its own, older, first sequence: the
// creation is fenced, the run ends with ErrLeaseLost, and no stream exists.
func TestDeposedPublisherDoesNotCreateTheStream_I6(t *testing.T) {
	e := setup(t)
	e.append(t, 3)
	stale, _ := e.deposed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.publisher(e.js, nil).Run(ctx, stale); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("the deposed publisher ended with %v, want ErrLeaseLost", err)
	}
	if _, err := e.js.Stream(ctx, stream.Name("b")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the deposed publisher created the stream (stream lookup: %v)", err)
	}
}

// deposed gives the boundary's lease to node-a for 100 ms, then to node-b
// once it expired, and returns both: node-a's term is stale.
func (e *env) deposed(t *testing.T) (stale, current backend.Lease) {
	t.Helper()
	ctx := context.Background()
	stale, err := e.store.AcquireLease(ctx, "b", "node-a", nil, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the stale lease to expire and node-b to take it", 10*time.Second, 10*time.Millisecond, func() bool {
		current, err = e.store.AcquireLease(ctx, "b", "node-b", nil, time.Minute)
		return err == nil
	})
	if current.Term <= stale.Term {
		t.Fatalf("new term %d not above stale term %d", current.Term, stale.Term)
	}
	return stale, current
}

// foreignStream creates the boundary's stream for another epoch, holding
// one message: a stream that a current leader deletes and recreates, a
// fenced operation.
func (e *env) foreignStream(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, stream.Config("b", "another-epoch", stream.Limits{}, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, stream.Subject("b", "t"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
}

// refusedLeavingStream runs a publisher on lease l, which the fence must
// refuse: it ends with ErrLeaseLost and the foreign stream is untouched
// (I6).
func (e *env) refusedLeavingStream(t *testing.T, l backend.Lease, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.publisher(e.js, nil).Run(ctx, l); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("%s ended with %v, want ErrLeaseLost", who, err)
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatalf("stream gone after %s ran: %v", who, err)
	}
	if info := s.CachedInfo(); stream.Epoch(&info.Config) != "another-epoch" || info.State.Msgs != 1 {
		t.Fatalf("%s changed the stream: epoch %q, %d messages", who, stream.Epoch(&info.Config), info.State.Msgs)
	}
}

// TestFenceRenewsTheLease_I6: the fence before a delete, purge or recreate
// renews the lease rather than only reading it. A lease that expired
// without anyone taking it yet still names this holder and term, so a read
// would let the delete through while another node may be taking the lease;
// the renewal refuses it and the stream is untouched. With a current lease
// the fence extends it (in the store's time) before the purge, so the
// lease cannot run out unnoticed during the operation.
func TestFenceRenewsTheLease_I6(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	expired, err := e.store.AcquireLease(ctx, "b", "node-a", nil, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the lease to expire", 10*time.Second, 10*time.Millisecond, func() bool {
		l, err := e.store.LeaseHolder(ctx, "b")
		return err == nil && time.Now().After(l.Expires.Add(10*time.Millisecond))
	})
	if l, _ := e.store.LeaseHolder(ctx, "b"); l.Holder != "node-a" || l.Term != expired.Term {
		t.Fatalf("lease row %+v, want node-a's expired term %d still there", l, expired.Term)
	}
	e.foreignStream(t)
	e.refusedLeavingStream(t, expired, "a publisher with an expired lease")

	// A current lease, short, and a stream behind the checkpoint: the
	// fence renews the lease for the publisher's TTL before purging.
	if err := e.js.DeleteStream(ctx, stream.Name("b")); err != nil {
		t.Fatal(err)
	}
	e.append(t, 5)
	cur, err := e.store.AcquireLease(ctx, "b", "node-b", nil, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.SaveCheckpoint(ctx, "b", cur, 5); err != nil {
		t.Fatal(err)
	}
	b, err := e.store.Boundary(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	// The stream of this epoch, empty: behind the checkpoint, so the
	// publisher purges it to sequence 6 (a fenced operation).
	if _, err := e.js.CreateStream(ctx, stream.Config("b", b.Epoch, stream.Limits{}, 1)); err != nil {
		t.Fatal(err)
	}
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50,
		PollInterval: 20 * time.Millisecond, LeaseTTL: time.Hour})
	runCtx2, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx2, cur) }()
	testutil.Eventually(t, "the lease renewed by the fence", 10*time.Second, 10*time.Millisecond, func() bool {
		l, err := e.store.LeaseHolder(ctx, "b")
		return err == nil && l.Term == cur.Term && l.Expires.After(cur.Expires.Add(10*time.Minute))
	})
	cancel2()
	if err := <-done; err != nil {
		t.Fatalf("publisher with a current lease: %v", err)
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatal(err)
	}
	if info := s.CachedInfo(); info.State.FirstSeq != 6 || info.State.Msgs != 0 {
		t.Fatalf("stream after the fenced purge: first %d, %d messages; want first 6, empty", info.State.FirstSeq, info.State.Msgs)
	}
}

// slowDelete is the real JetStream whose DeleteStream waits for the test
// before it is sent: a delete that takes its time on a loaded cluster.
type slowDelete struct {
	jetstream.JetStream
	entered, proceed chan struct{}
	once             sync.Once
	ctxErr, err      chan error
}

func (s *slowDelete) DeleteStream(ctx context.Context, name string) error {
	s.once.Do(func() { close(s.entered) })
	<-s.proceed
	s.ctxErr <- ctx.Err()
	err := s.JetStream.DeleteStream(ctx, name)
	s.err <- err
	return err
}

// TestStepDownWaitsForFencedDelete_I6: a leader that steps down because it
// is stalled (lease.Runner.Stalled) while its publisher is inside a fenced
// delete of the stream keeps the lease until the delete has returned: were
// it released first, another node could take it and have its new stream
// erased by the old leader's delete. The delete is not abandoned by the
// step-down (its context lives until the renewed lease's deadline), and
// the lease is released once it returned.
func TestStepDownWaitsForFencedDelete_I6(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A stream of another epoch: the publisher deletes it (fenced).
	if _, err := e.js.CreateStream(ctx, stream.Config("b", "another-epoch", stream.Limits{}, 1)); err != nil {
		t.Fatal(err)
	}
	e.append(t, 5)
	js := &slowDelete{JetStream: e.js, entered: make(chan struct{}), proceed: make(chan struct{}),
		ctxErr: make(chan error, 1), err: make(chan error, 1)}
	ttl := 3 * time.Second
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: js, BatchSize: 50,
		PollInterval: 20 * time.Millisecond, LeaseTTL: ttl})
	var stalled, asked atomic.Bool
	r := &lease.Runner{Store: e.store, Holder: "a", TTL: ttl, Stalled: func() string {
		if stalled.Load() {
			asked.Store(true)
			return "no progress"
		}
		return ""
	}}
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, "b", p.Run, nil) }()
	select {
	case <-js.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher never deleted the stream of another epoch")
	}
	stalled.Store(true)
	testutil.Eventually(t, "the runner to decide to step down", 10*time.Second, 10*time.Millisecond, asked.Load)
	for end := time.Now().Add(ttl / 10); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cur, err := e.store.LeaseHolder(ctx, "b"); err != nil || cur.Holder != "a" || cur.Expires.Unix() <= 0 {
			t.Fatalf("lease %+v (err %v) released while the fenced delete was in flight", cur, err)
		}
	}
	if _, err := e.store.AcquireLease(ctx, "b", "node-b", nil, time.Minute); !errors.Is(err, event.ErrLeaseHeld) {
		t.Fatalf("another node acquiring during the fenced delete: %v, want ErrLeaseHeld", err)
	}
	close(js.proceed)
	if err := <-js.ctxErr; err != nil {
		t.Fatalf("the fenced delete was sent with an ended context (%v): abandoned by the step-down", err)
	}
	if err := <-js.err; err != nil {
		t.Fatalf("the fenced delete failed: %v", err)
	}
	testutil.Eventually(t, "the lease released after the delete returned", 10*time.Second, 10*time.Millisecond, func() bool {
		cur, _ := e.store.LeaseHolder(ctx, "b")
		return cur.Holder == "a" && cur.Expires.Unix() <= 0
	})
	cancel()
	<-done
}

// wideWindow returns a publisher whose window spans several batches (200
// messages, batches of 50), so that later batches are in flight while an
// earlier one is acknowledged and checkpointed.
func (e *env) wideWindow(wake chan struct{}, afterAck func(last uint64)) *publisher.Publisher {
	return publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50, Window: 200,
		PollInterval: 20 * time.Millisecond, Wake: wake, AfterAck: afterAck, Limits: stream.Limits{Batched: true}})
}

// TestWideWindowCheckpointNeverAhead_I3: with several batches in flight,
// each batch's acknowledgement finds the stored checkpoint at or below the
// acknowledged position and at or below the stream's last sequence: a
// checkpoint never names a message that is not yet in the stream (I3).
// Appends with wake-ups continue while it publishes, so that the caught-up
// path also reads on at a wake-up with acknowledgements still pending.
func TestWideWindowCheckpointNeverAhead_I3(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		e.append(t, 100)
	}
	var acks atomic.Int64
	wake := make(chan struct{}, 1)
	p := e.wideWindow(wake, func(last uint64) {
		acks.Add(1)
		cp, err := e.store.Checkpoint(ctx, "b")
		if err != nil {
			t.Error(err)
			return
		}
		s, err := e.js.Stream(ctx, stream.Name("b"))
		if err != nil {
			t.Error(err)
			return
		}
		streamLast := s.CachedInfo().State.LastSeq
		if cp > last || cp > streamLast {
			t.Errorf("batch ending at %d acknowledged: the stored checkpoint is already %d, the stream's last sequence %d (I3)",
				last, cp, streamLast)
		}
	})
	stop := run(t, p, e.lease(t))
	for i := 0; i < 100; i++ {
		e.append(t, 10)
		poke(wake)
	}
	e.waitCheckpoint(t, 2000, 30*time.Second)
	stopped(t, stop)
	if n := acks.Load(); n < 20 {
		t.Fatalf("%d batches acknowledged, want at least 20 (2000 events in batches of at most 50)", n)
	}
	e.wantStreamLast(t, 2000)
}

// TestWideWindowRefusalNeverSkips_I2_I3_I4: a foreign message lands in the
// stream while several batches are in flight; the publishes after it are
// refused. The publisher recreates the stream from its checkpoint, which
// must not be past the foreign message's sequence, so every position ends
// up in the stream at its own sequence.
func TestWideWindowRefusalNeverSkips_I2_I3_I4(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		e.append(t, 100)
	}
	var once sync.Once
	var foreignSeq atomic.Uint64
	p := e.wideWindow(make(chan struct{}, 1), func(last uint64) {
		if last < 100 {
			return
		}
		once.Do(func() {
			ack, err := e.js.Publish(ctx, stream.Subject("b", "intruder"), []byte("x"))
			if err != nil {
				t.Error(err)
				return
			}
			foreignSeq.Store(ack.Sequence)
		})
	})
	stop := run(t, p, e.lease(t))
	e.waitCheckpoint(t, 1000, 60*time.Second)
	stopped(t, stop)
	fs := foreignSeq.Load()
	if fs == 0 {
		t.Fatal("the foreign message was not published")
	}
	s, err := e.js.Stream(ctx, stream.Name("b"))
	if err != nil {
		t.Fatal(err)
	}
	first := s.CachedInfo().State.FirstSeq
	if first > fs {
		t.Fatalf("the foreign message took sequence %d, but the stream was recreated from %d: positions %d..%d were skipped (I4)",
			fs, first, fs, first-1)
	}
	e.wantStreamLast(t, 1000)
	t.Logf("foreign message at sequence %d, stream now %d..1000", fs, first)
}

// TestBehindWakesIdlePublisher_I4: with its own poll a long backstop (an
// hour), an idle publisher publishes events whose wake-up was never sent
// once a shared head read finds it behind (Behind) and wakes it: the
// node's head watcher is what catches a lost wake-up (I4). Behind is false
// while the publisher has read everything up to the head, and true for a
// head row held by an open transaction or for another epoch.
func TestBehindWakesIdlePublisher_I4(t *testing.T) {
	e := setup(t)
	e.append(t, 2)
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: time.Hour, Wake: wake})
	stop := run(t, p, e.lease(t))
	defer stopped(t, stop)
	testutil.Eventually(t, "the first 2 events published", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 2 })
	// Idle at 2: a head of 2 is not behind; a held row or another epoch is.
	testutil.Eventually(t, "the publisher idle at the head", 10*time.Second, 10*time.Millisecond, func() bool {
		return p.Behind(backend.Head{Boundary: event.Boundary{Name: "b", Epoch: e.head(t).Boundary.Epoch, Head: 3}})
	})
	h := e.head(t)
	if p.Behind(h) {
		t.Fatalf("Behind(%+v) = true for a publisher idle at the head", h)
	}
	held, other, back := h, h, h
	held.Held = true
	other.Boundary.Epoch = "another-epoch"
	back.Boundary.Head = 1 // the store restored from an older backup
	if !p.Behind(back) {
		t.Fatalf("Behind(%+v) = false for a head below the published 2: the store went back", back)
	}
	if !p.Behind(held) {
		t.Fatalf("Behind(%+v) = false: a held head row must send the idle publisher to probe it", held)
	}
	if !p.Behind(other) {
		t.Fatalf("Behind(%+v) = false for another epoch", other)
	}

	// Three events appended without a wake-up: the hour-long poll would
	// leave them unpublished; the shared read finds the publisher behind.
	e.append(t, 3)
	h = e.head(t)
	if h.Boundary.Head != 5 || !p.Behind(h) {
		t.Fatalf("after appending 3 without a wake-up: Behind(%+v) = %v, want head 5 and true", h, p.Behind(h))
	}
	if cp := e.checkpoint(); cp != 2 {
		t.Fatalf("checkpoint %d before any wake-up, want 2: the publisher polled although its poll interval is an hour", cp)
	}
	wake <- struct{}{}
	testutil.Eventually(t, "the 3 events published after the wake-up", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 5 })
	e.wantStreamLast(t, 5)
	testutil.Eventually(t, "the publisher idle at 5, not behind", 10*time.Second, 10*time.Millisecond, func() bool {
		return !p.Behind(e.head(t)) && p.Behind(backend.Head{Boundary: event.Boundary{Name: "b", Epoch: h.Boundary.Epoch, Head: 6}})
	})
}

// readCounter counts the store's reads by the position they read after,
// and calls after (when set) once a read has returned: a commit that lands
// once the read's snapshot is taken.
type readCounter struct {
	publisher.Store
	mu    sync.Mutex
	reads map[uint64]int
	after func(from uint64, events []event.Event)
}

func (c *readCounter) Read(ctx context.Context, b string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	epoch, events, err := c.Store.Read(ctx, b, after, limit, q)
	c.mu.Lock()
	c.reads[after]++
	f := c.after
	c.mu.Unlock()
	if f != nil {
		f(after, events)
	}
	return epoch, events, err
}

func (c *readCounter) count(after uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[after]
}

// TestShortPageReadOnce_I4: a short page reached the head, and a wake-up
// pending when a read starts is for a commit that read sees: the
// publisher does not read again at once (it did, a store round trip per
// group that found nothing, docs/performance.md), yet an event committed
// after a read, with its wake-up, is published without a poll (the poll
// interval is an hour): I4.
func TestShortPageReadOnce_I4(t *testing.T) {
	e := setup(t)
	e.append(t, 2)
	c := &readCounter{Store: e.store, reads: map[uint64]int{}}
	wake := make(chan struct{}, 1)
	wake <- struct{}{} // the wake-up of the 2 events, pending at the start
	p := publisher.New(publisher.Config{Boundary: "b", Store: c, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: time.Hour, Wake: wake})
	stop := run(t, p, e.lease(t))
	defer stopped(t, stop)
	idleAt := func(pos uint64) {
		t.Helper()
		epoch := e.head(t).Boundary.Epoch
		testutil.Eventually(t, fmt.Sprintf("the publisher idle at %d", pos), 10*time.Second, 10*time.Millisecond, func() bool {
			return p.Behind(backend.Head{Boundary: event.Boundary{Name: "b", Epoch: epoch, Head: pos + 1}}) &&
				!p.Behind(backend.Head{Boundary: event.Boundary{Name: "b", Epoch: epoch, Head: pos}})
		})
	}
	idleAt(2)
	if n := c.count(2); n != 0 {
		t.Fatalf("%d reads after 2 with the page 1..2 short and the start's wake-up taken by the first read, want 0", n)
	}

	// One group, its wake-up: one read.
	e.append(t, 3)
	poke(wake)
	idleAt(5)
	if n, m := c.count(2), c.count(5); n != 1 || m != 0 {
		t.Fatalf("reads after 2: %d, after 5: %d, for a group of 3 and its wake-up; want 1 and 0", n, m)
	}

	// A commit once the read of 6 has returned, with its wake-up: it must
	// be read, or it waits for an hour's poll.
	failed := c.commitAfterRead(e, wake, 5)
	e.append(t, 1)
	poke(wake)
	testutil.Eventually(t, "position 7, committed after the read of 6, published", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 7 })
	if err := failed(); err != nil {
		t.Fatal(err)
	}
	idleAt(7)
	e.wantStreamLast(t, 7)
	if n := c.count(7); n != 0 {
		t.Fatalf("%d reads after 7, want 0", n)
	}
}

// commitAfterRead makes the first read after from that returns events
// append one more event and send its wake-up once it has returned, as a
// commit landing after the read's snapshot. The append runs on the
// publisher's goroutine: its error, if any, is returned by the function
// this returns, for the test's goroutine to fail on.
func (c *readCounter) commitAfterRead(e *env, wake chan struct{}, from uint64) (failed func() error) {
	var (
		once sync.Once
		mu   sync.Mutex
		err  error
	)
	in := []event.Input{{ID: event.NewID(), Type: "t", Data: json.RawMessage(`{}`), Tags: []string{}}}
	c.mu.Lock()
	c.after = func(after uint64, events []event.Event) {
		if after == from && len(events) > 0 {
			once.Do(func() {
				_, aerr := e.store.Append(context.Background(), "b", in, nil)
				mu.Lock()
				err = aerr
				mu.Unlock()
				poke(wake)
			})
		}
	}
	c.mu.Unlock()
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		return err
	}
}

// TestReadAheadTakesWakeBeforeItsRead_I4: the read ahead of a full page
// takes a pending wake-up before it reads, never after: an event committed
// once that read has returned, with its wake-up, is published without a
// poll (an hour). Pages of 2, so the backlog of 3 makes a full page and a
// read ahead after 2.
func TestReadAheadTakesWakeBeforeItsRead_I4(t *testing.T) {
	e := setup(t)
	e.append(t, 3)
	c := &readCounter{Store: e.store, reads: map[uint64]int{}}
	wake := make(chan struct{}, 1)
	failed := c.commitAfterRead(e, wake, 2)
	p := publisher.New(publisher.Config{Boundary: "b", Store: c, JS: e.js, BatchSize: 2, Window: 8,
		PollInterval: time.Hour, Wake: wake})
	stop := run(t, p, e.lease(t))
	defer stopped(t, stop)
	testutil.Eventually(t, "position 4, committed after the read ahead of 3, published", 10*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 4 })
	if err := failed(); err != nil {
		t.Fatal(err)
	}
	e.wantStreamLast(t, 4)
}

// gatedSave holds every checkpoint write at gate until it is closed,
// reporting the positions on entered.
type gatedSave struct {
	publisher.Store
	gate    chan struct{}
	entered chan uint64
}

func (g *gatedSave) SaveCheckpoint(ctx context.Context, b string, l backend.Lease, pos uint64) error {
	g.entered <- pos
	<-g.gate
	return g.Store.SaveCheckpoint(ctx, b, l, pos)
}

// TestPublishingDoesNotWaitForCheckpoint_I3: events committed while a
// checkpoint write is under way are published at once, not after that
// write; the checkpoint then catches up with what was acknowledged, and no
// further. Before, the publishing loop wrote each checkpoint itself, and
// the events committed meanwhile waited behind the write (a commit with a
// WAL flush on PostgreSQL).
func TestPublishingDoesNotWaitForCheckpoint_I3(t *testing.T) {
	e := setup(t)
	g := &gatedSave{Store: e.store, gate: make(chan struct{}), entered: make(chan uint64, 64)}
	wake := make(chan struct{}, 1)
	// A poll interval longer than the test: only the wake-ups move it.
	p := publisher.New(publisher.Config{Boundary: "b", Store: g, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: time.Hour, Wake: wake})
	stop := run(t, p, e.lease(t))
	kick := func() { poke(wake) }

	e.append(t, 1)
	kick()
	select {
	case pos := <-g.entered:
		if pos != 1 {
			t.Fatalf("first checkpoint write at %d, want 1", pos)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no checkpoint write after the first event was published")
	}
	// The write of checkpoint 1 is held. New events must still go out.
	e.append(t, 5)
	kick()
	testutil.Eventually(t, "positions 2..6 published while checkpoint 1 is being written", 30*time.Second, 10*time.Millisecond, func() bool {
		kick()
		return e.streamLast() == 6
	})
	if cp := e.checkpoint(); cp != 0 {
		t.Fatalf("checkpoint %d stored while its write was held", cp)
	}
	close(g.gate)
	testutil.Eventually(t, "the checkpoint to catch up with 6", 30*time.Second, 10*time.Millisecond, func() bool { return e.checkpoint() == 6 })
	if err := stop(); err != nil {
		t.Fatalf("publisher: %v", err)
	}
	close(g.entered)
	last := uint64(0)
	for pos := range g.entered {
		if pos <= last || pos > 6 {
			t.Fatalf("checkpoint writes %d after %d: each must be newer and at most the last acknowledged (6)", pos, last)
		}
		last = pos
	}
	if cp := e.checkpoint(); cp != 6 {
		t.Fatalf("checkpoint %d after a clean stop, want 6", cp)
	}
	e.checkStream(t)
}

// leaseLostSave refuses every checkpoint write as a stale term would.
type leaseLostSave struct{ publisher.Store }

func (leaseLostSave) SaveCheckpoint(context.Context, string, backend.Lease, uint64) error {
	return fmt.Errorf("checkpoint refused: %w", event.ErrLeaseLost)
}

// TestCheckpointLeaseLostEndsIdlePublisher_I3_I6: a checkpoint write that
// the store refuses for a stale term ends the run with ErrLeaseLost even
// when the publisher has nothing more to publish and waits for a wake-up:
// the background write's failure wakes it. Its poll interval is an hour,
// so without that it would wait (and keep the boundary) until then.
func TestCheckpointLeaseLostEndsIdlePublisher_I3_I6(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l, err := e.store.AcquireLease(ctx, "b", "n", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e.append(t, 3)
	p := publisher.New(publisher.Config{Boundary: "b", Store: leaseLostSave{e.store}, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: time.Hour})
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx, l) }()
	select {
	case err := <-done:
		if !errors.Is(err, event.ErrLeaseLost) {
			t.Fatalf("publisher ended with %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher kept running for 30 s after its checkpoint write was refused for a stale term")
	}
	if cp, _ := e.store.Checkpoint(ctx, "b"); cp != 0 {
		t.Fatalf("checkpoint %d stored, though every write was refused", cp)
	}
	if st := p.Status(); st.State != status.StateStandby {
		t.Fatalf("state %s (%s), want standby after the lease was lost", st.State, st.Reason)
	}
}

// droppedSave accepts every checkpoint write and keeps none: a process
// that died before its checkpoint writes reached the store.
type droppedSave struct{ *sqlite.Store }

func (droppedSave) SaveCheckpoint(context.Context, string, backend.Lease, uint64) error { return nil }

// TestVerifyNeedsNoConsumerSlot_I2_I4: orisun's relay never depends on a
// consumer slot an application can take. The stream holds positions 1..30
// beyond the checkpoint (0), so the next run must verify them before it
// resumes; an application has taken every consumer slot of the stream
// (JetStream's per-stream limit, 1,000 by default), so the verification's
// reader is refused. The run reads the messages one by one instead, moves
// the checkpoint to 30 and publishes what was appended since, each at its
// position (I2), without a stall (I4).
func TestVerifyNeedsNoConsumerSlot_I2_I4(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.append(t, 30)
	first := publisher.New(publisher.Config{Boundary: "b", Store: droppedSave{e.store}, JS: e.js, BatchSize: 50, Window: 8,
		PollInterval: 20 * time.Millisecond})
	stop := run(t, first, e.lease(t))
	testutil.Eventually(t, "30 events in the stream", 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := e.js.Stream(ctx, stream.Name("b"))
		return err == nil && s.CachedInfo().State.LastSeq == 30
	})
	stopped(t, stop)
	if cp := e.checkpoint(); cp != 0 {
		t.Fatalf("checkpoint %d, want 0 (the writes were dropped)", cp)
	}

	// An application fills the stream's consumer slots with durable
	// consumers (they never expire).
	app, err := jetstream.New(connectApp(t, e.ns))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		_, err := app.CreateConsumer(ctx, stream.Name("b"), jetstream.ConsumerConfig{Durable: fmt.Sprintf("hog%d", n)})
		if errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
			break
		}
		if err != nil {
			t.Fatalf("consumer %d: %v", n, err)
		}
		if n > 100_000 {
			t.Fatal("JetStream set no limit on the stream's consumers")
		}
	}
	t.Logf("the application holds %d consumers; JetStream refuses more", n)

	e.append(t, 10)
	stop = run(t, e.publisher(e.js, nil), e.lease(t))
	testutil.Eventually(t, "the checkpoint at 40, the stream verified without a consumer", 30*time.Second, 20*time.Millisecond,
		func() bool { return e.checkpoint() == 40 })
	stopped(t, stop)
	e.checkStream(t)
}

// connectApp connects to the server as an application client: over TCP,
// without credentials (the application principal).
func connectApp(t *testing.T, ns *natsembed.Server) *nats.Conn {
	t.Helper()
	nc := natstest.Connect(t, ns.ClientURL())
	return nc
}

// TestStoreGoneBackStallsIdlePublisher_I7: an idle publisher has published
// 1..5 when the store goes back in time (restored from an older backup:
// events 4 and 5, the head and the checkpoint as they were at 3). The
// node's shared head read finds the publisher behind; woken, it reads the
// head itself and stalls on a stream ahead of the store, instead of
// staying "caught up" with a stream that holds what the store does not.
func TestStoreGoneBackStallsIdlePublisher_I7(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.append(t, 5)
	wake := make(chan struct{}, 1)
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: e.js, BatchSize: 50,
		PollInterval: time.Hour, Wake: wake})
	run(t, p, e.lease(t))
	testutil.Eventually(t, "the publisher idle at 5", 10*time.Second, 10*time.Millisecond, func() bool {
		return e.checkpoint() == 5 && !p.Behind(e.head(t)) && p.Status().State == status.StateLeading
	})
	db, err := sql.Open("sqlite", filepath.Join(e.dir, sqlite.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DELETE FROM events WHERE boundary = 'b' AND position > 3`,
		`DELETE FROM event_tags WHERE boundary = 'b' AND position > 3`,
		`UPDATE boundaries SET head = 3, checkpoint = 3 WHERE name = 'b'`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if h := e.head(t); h.Boundary.Head != 3 || !p.Behind(h) {
		t.Fatalf("Behind(%+v) = false: a head below the published 5 must wake the publisher", h)
	}
	wake <- struct{}{}
	testutil.Eventually(t, "the publisher stalled on a stream ahead of the store", 10*time.Second, 10*time.Millisecond, func() bool {
		st := p.Status()
		return st.State == status.StateStalled && strings.Contains(st.Reason, "went back in time")
	})
}

// heldAcks is the real JetStream whose acknowledgements of positions past
// holdAfter (0: none held) never reach the publisher: the messages are
// published, their futures never answer.
type heldAcks struct {
	jetstream.JetStream
	holdAfter atomic.Uint64
}

func (h *heldAcks) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f, err := h.JetStream.PublishMsgAsync(m, opts...)
	pos, _ := strconv.ParseUint(m.Header.Get(stream.HeaderPosition), 10, 64)
	if err != nil || h.holdAfter.Load() == 0 || pos <= h.holdAfter.Load() {
		return f, err
	}
	return unanswered{f}, nil
}

// unanswered is a future that never answers.
type unanswered struct{ jetstream.PubAckFuture }

func (unanswered) Ok() <-chan *jetstream.PubAck { return nil }
func (unanswered) Err() <-chan error            { return nil }

// TestAckTimeoutBoundsEachWait: the publisher's one timer for its
// acknowledgements (reset for each message, issue 22) bounds each wait by
// AckTimeout, not the run: events appended one at a time over two and a
// half times AckTimeout are all published without a timeout; and an
// acknowledgement that never comes ends the wait after AckTimeout, naming
// its position. (AckTimeout is a second: an acknowledgement on a loaded
// machine may take a good part of 200 ms.)
func TestAckTimeoutBoundsEachWait(t *testing.T) {
	e := setup(t)
	js := &heldAcks{JetStream: e.js}
	const ackTimeout = time.Second
	p := publisher.New(publisher.Config{Boundary: "b", Store: e.store, JS: js, BatchSize: 50, Window: 8,
		PollInterval: 5 * time.Millisecond, AckTimeout: ackTimeout})
	var timedOut atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if st := p.Status(); strings.Contains(st.Reason, "no acknowledgement") {
				timedOut.Store(st.Reason)
			}
			time.Sleep(2 * time.Millisecond)
			if js.holdAfter.Load() != 0 {
				return
			}
		}
	}()
	run(t, p, e.lease(t))
	start := time.Now()
	n := 0
	for time.Since(start) < 5*ackTimeout/2 {
		e.append(t, 1)
		n++
		time.Sleep(20 * time.Millisecond)
	}
	testutil.Eventually(t, "every event published", 10*time.Second, 10*time.Millisecond, func() bool {
		return e.checkpoint() == uint64(n)
	})
	js.holdAfter.Store(uint64(n))
	<-done
	if r := timedOut.Load(); r != nil {
		t.Fatalf("a wait timed out while every acknowledgement came: %s", r)
	}
	e.append(t, 1)
	testutil.Eventually(t, "the held acknowledgement timed out", 10*time.Second, 5*time.Millisecond, func() bool {
		st := p.Status()
		return strings.Contains(st.Reason, fmt.Sprintf("publish position %d: no acknowledgement within %s", n+1, ackTimeout))
	})
}
