package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// natsServer starts one standalone nats-server process with JetStream and
// the two users of natsCluster, no cluster block: its streams are R1 on a
// server that is not clustered, so every publish is checked against the
// stream's last sequence where it is stored.
func natsServer(t *testing.T) *proc {
	t.Helper()
	servers, _ := startGroup(t, "1 nats-server process", 1, testutil.FreePorts, func(ports []int) []*proc {
		return []*proc{startNATSServer(t, 1, ports[0], "")}
	}, natsUp, 60*time.Second)
	return servers[0]
}

// wireTap records, on a connection of the test's own, every publish into
// the boundary's event subjects (position, expected last sequence, reply
// subject, when it was seen) and every JetStream answer on a reply inbox
// that refuses a publish for a wrong last sequence. A core NATS
// subscription receives a copy of each publish whether or not the stream
// stores it, so a publish the stream refuses is seen too.
type wireTap struct {
	mu sync.Mutex
	// pubs by reply subject.
	pubs map[string]tapPub
	// refusals are the wrong-last-sequence answers, in arrival order.
	refusals []tapRefusal
}

type tapPub struct {
	pos, expect string
	at          time.Time
}

type tapRefusal struct {
	reply, description string
	at                 time.Time
}

func startWireTap(t *testing.T, url string) *wireTap {
	t.Helper()
	nc := natstest.Connect(t, url, nats.UserInfo(natsAppUser, natsAppPassword), nats.Name("wire-tap"))
	w := &wireTap{pubs: map[string]tapPub{}}
	if _, err := nc.Subscribe(stream.Subjects("default"), func(m *nats.Msg) {
		w.mu.Lock()
		w.pubs[m.Reply] = tapPub{pos: m.Header.Get(stream.HeaderPosition), expect: m.Header.Get(jetstream.ExpectedLastSeqHeader), at: time.Now()}
		w.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	answer := func(m *nats.Msg) {
		var resp struct {
			Error *struct {
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if json.Unmarshal(m.Data, &resp) != nil || resp.Error == nil ||
			resp.Error.ErrCode != int(jetstream.JSErrCodeStreamWrongLastSequence) {
			return
		}
		w.mu.Lock()
		w.refusals = append(w.refusals, tapRefusal{reply: m.Subject, description: resp.Error.Description, at: time.Now()})
		w.mu.Unlock()
	}
	// orisun's connections to an external NATS use the default inbox
	// prefix; the embedded server's use their own.
	for _, inbox := range []string{"_INBOX.>", "_ORISUN_INBOX.>"} {
		sub, err := nc.Subscribe(inbox, answer)
		if err != nil {
			t.Fatal(err)
		}
		sub.SetPendingLimits(-1, -1)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// refusedSince returns the refused publishes whose copy was seen at or
// after since, as "position p (expected last sequence e): description".
func (w *wireTap) refusedSince(since time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range w.refusals {
		p, ok := w.pubs[r.reply]
		if !ok || p.at.Before(since) {
			continue
		}
		out = append(out, fmt.Sprintf("position %s (expected last sequence %s) at +%s: %s",
			p.pos, p.expect, p.at.Sub(since).Round(time.Millisecond), r.description))
	}
	return out
}

// streamWatch samples the stored checkpoint, then the stream's last
// sequence, and keeps the first violation of I3: the checkpoint went back,
// or it was above the stream's last sequence (read after it: the stream
// only grows in this test, so a checkpoint read first can never be above
// a last sequence read after it unless it was ahead of JetStream).
type streamWatch struct {
	mu        sync.Mutex
	maxCP     uint64
	violation string
	samples   int
	halt      func()
}

func startStreamWatch(t *testing.T, store *postgres.Store, s jetstream.Stream) *streamWatch {
	w := &streamWatch{}
	w.halt = testutil.Every(t, 20*time.Millisecond, func(context.Context) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cp, err := store.Checkpoint(ctx, "default")
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		cancel()
		if err != nil {
			return
		}
		w.mu.Lock()
		w.samples++
		if w.violation == "" && cp < w.maxCP {
			w.violation = fmt.Sprintf("the checkpoint went back from %d to %d", w.maxCP, cp)
		}
		if w.violation == "" && cp > info.State.LastSeq {
			w.violation = fmt.Sprintf("the checkpoint %d was above the stream's last sequence %d", cp, info.State.LastSeq)
		}
		w.maxCP = max(w.maxCP, cp)
		w.mu.Unlock()
	})
	return w
}

// appendBacklog appends n events to the default boundary directly in the
// store, 1000 to a transaction, and returns the head.
func appendBacklog(t *testing.T, store *postgres.Store, n int, tag string) uint64 {
	t.Helper()
	var head uint64
	for done := 0; done < n; {
		k := min(1000, n-done)
		in := make([]event.Input, k)
		for j := range in {
			in[j] = event.Input{Type: "stopped.test", Data: json.RawMessage(fmt.Sprintf(`{%q:%d}`, tag, done+j))}
		}
		prepared, err := event.Prepare("default", in, event.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Append(contextFor(t, 60*time.Second), "default", prepared, nil)
		if err != nil {
			t.Fatalf("append %d events after %d: %v", k, done, err)
		}
		head = res.First + uint64(k) - 1
		done += k
	}
	return head
}

// checkStreamAgainstStore reads the whole stream through an ordered
// consumer and checks that it holds exactly 1..head, sequence s carrying
// position s and the store's event at s (I2).
func checkStreamAgainstStore(t *testing.T, js jetstream.JetStream, store *postgres.Store, head uint64) {
	t.Helper()
	ctx := contextFor(t, 5*time.Minute)
	s := natstest.Stream(t, js, stream.Name("default"))
	info := s.CachedInfo()
	if info.State.FirstSeq != 1 || info.State.LastSeq != head || info.State.Msgs != head {
		t.Fatalf("I2: the stream holds %d messages %d..%d; want exactly 1..%d (the store's head)",
			info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, head)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for after := uint64(0); after < head; {
		_, evs, err := store.Read(ctx, "default", after, 1000, nil)
		if err != nil || len(evs) == 0 {
			t.Fatalf("store read after %d: %d events, %v", after, len(evs), err)
		}
		batch, err := cons.Fetch(len(evs), jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			e := evs[i]
			seq, pos, id := md.Sequence.Stream, msg.Headers().Get(stream.HeaderPosition), msg.Headers().Get(stream.HeaderEventID)
			if seq != e.Position || pos != strconv.FormatUint(seq, 10) || id != e.ID {
				t.Fatalf("I2: stream sequence %d carries position %s, event %s; the store has %s at %d", seq, pos, id, e.ID, e.Position)
			}
			i++
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("stream after %d: %v", after, err)
		}
		if i != len(evs) {
			t.Fatalf("stream after %d: %d messages delivered, the store has %d", after, i, len(evs))
		}
		after = evs[len(evs)-1].Position
	}
}

// TestStoppedLeaderRefusedOnSharedNATS_I2_I3_I6: two orisun processes on
// one PostgreSQL share one external nats-server (issue 3, point 4). A
// backlog is in the store before they start; the leader, A, drains it in
// batches of stoppedBatch events with at most stoppedWindow publishes in
// flight, and is stopped with SIGSTOP in the middle of a batch (the
// stream's last sequence is checked first: at least 1000 past a batch's
// start and 5000 before its end, after A checkpointed a whole batch). B
// takes the lease when A's runs out and publishes the backlog to the head.
// Then A is continued: a publisher sends the rest of the batch it was
// sending (its sends and acknowledgements use a context that is not
// cancelled), so its stale publishes really reach the shared stream, and
// the stream refuses them for their expected last sequence (docs/design.md §5,
// I2, I6). The test sees them on the wire, with JetStream's refusal, on a
// connection of its own: A's log alone cannot show them, since a refusal
// that arrives after the lease loop cancelled the run is not logged.
//
// Mid-batch, A has no checkpoint write due until the batch's end, so a
// refused checkpoint write of A's is not what this test shows (the root
// package's TestStoppedLeaderStepsDown_I3_I6 and fault scenario S5 do); the
// checkpoint is watched throughout instead: never back, never above the
// stream's last sequence (I3). Nats-Msg-Id is off
// (ORISUN_NATS_MSG_ID, off by default; set here so a changed default
// cannot turn it on): with it, a publisher without the fence
// would have its re-publish of an event B already published answered as a
// duplicate and the stream would hide the fault; without it the expected
// last sequence is the only guard, and a publisher that does not send one
// fails this test with A's messages stored past the head.
func TestStoppedLeaderRefusedOnSharedNATS_I2_I3_I6(t *testing.T) {
	const (
		// Long enough that A's renewals do not miss on a loaded machine
		// (a renewal must answer before the lease runs out; with 2 s one
		// missed under CI's load and A had stepped down before the stop).
		ttl           = 5 * time.Second
		stoppedBatch  = 10000
		stoppedWindow = 4
		backlog       = 40000
	)
	srv := natsServer(t)
	pgURL := pgtest.URL(t)
	store := openStore(t, pgURL, 4)
	if _, _, err := store.CreateBoundary(contextFor(t, 30*time.Second), "default"); err != nil {
		t.Fatal(err)
	}
	head := appendBacklog(t, store, backlog, "backlog")
	if head != backlog {
		t.Fatalf("the backlog ends at %d, want %d", head, backlog)
	}

	js := jsConnect(t, srv.nats, nats.UserInfo(natsAppUser, natsAppPassword))
	tap := startWireTap(t, srv.nats)

	nodes := externalNodes(t, pgURL, []*proc{srv}, 2, ttl,
		"ORISUN_PUBLISH_BATCH="+strconv.Itoa(stoppedBatch), "ORISUN_PUBLISH_WINDOW="+strconv.Itoa(stoppedWindow),
		"ORISUN_NATS_MSG_ID=false")
	started := time.Now()
	dbCtx := func() context.Context { return contextFor(t, 10*time.Second) }

	// A is whoever holds the lease; the stream exists once it publishes.
	var a, b *proc
	testutil.Eventually(t, "a node to take the lease", 90*time.Second, 20*time.Millisecond, func() bool {
		l, err := store.LeaseHolder(dbCtx(), "default")
		if err != nil {
			return false
		}
		for i, n := range nodes {
			if strings.HasPrefix(l.Holder, n.Name+"#") {
				a, b = n, nodes[1-i]
				return true
			}
		}
		return false
	})
	leaseA, err := store.LeaseHolder(dbCtx(), "default")
	if err != nil {
		t.Fatal(err)
	}
	var s jetstream.Stream
	testutil.Eventually(t, "the stream to exist", 60*time.Second, 20*time.Millisecond, func() bool {
		s, err = js.Stream(dbCtx(), stream.Name("default"))
		return err == nil
	})
	watch := startStreamWatch(t, store, s)

	// SIGSTOP A in the middle of its second (or a later) batch.
	lastSeq := func() uint64 {
		info, err := s.Info(dbCtx())
		if err != nil {
			return 0
		}
		return info.State.LastSeq
	}
	var atStop uint64
	testutil.Eventually(t, "A to publish into the middle of a batch after its first", 5*time.Minute, 5*time.Millisecond, func() bool {
		// The checkpoint is written in the background, a moment after
		// the batch's acknowledgement: wait for the first batch's. Read
		// before the stream, so that nothing but the checks below comes
		// between reading the stream's position and the SIGSTOP.
		if cp, err := store.Checkpoint(dbCtx(), "default"); err != nil || cp < stoppedBatch {
			return false
		}
		l := lastSeq()
		if l >= head {
			t.Fatalf("A published the whole backlog (%d) before it could be stopped mid-batch", head)
		}
		in := l % stoppedBatch
		if l < stoppedBatch || in < 1000 || in > stoppedBatch-5000 {
			return false
		}
		if a.Logged("component=lease", "stepping down") {
			// Not the case under test (a leader stopped while it holds its
			// lease), and nothing would be refused: say so, loudly.
			t.Fatalf("%s stepped down on its own before it could be stopped (its store did not answer a renewal in time):\n%s",
				a.Name, a.Tail(20))
		}
		if err := a.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		atStop = l
		return true
	})
	stopped := time.Now()
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	afterStop := lastSeq()
	cpAtStop, _ := store.Checkpoint(dbCtx(), "default")
	batchEnd := (afterStop/stoppedBatch + 1) * stoppedBatch
	t.Logf("%s leads (term %d); stopped with SIGSTOP %s after the start, at stream sequence %d (%d read just after), "+
		"checkpoint %d, in its batch %d..%d",
		a.Name, leaseA.Term, stopped.Sub(started).Round(time.Millisecond), atStop, afterStop, cpAtStop, batchEnd-stoppedBatch+1, batchEnd)
	if afterStop%stoppedBatch == 0 || cpAtStop < stoppedBatch {
		t.Fatalf("A was not stopped in the middle of a batch after its first checkpoint: stream at %d, checkpoint %d", afterStop, cpAtStop)
	}

	// B takes the lease with a newer term and publishes up to the head.
	var leaseB = leaseA
	took := testutil.Eventually(t, "B to take the lease", 60*time.Second, 20*time.Millisecond, func() bool {
		l, err := store.LeaseHolder(dbCtx(), "default")
		if err == nil && strings.HasPrefix(l.Holder, b.Name+"#") && l.Term > leaseA.Term {
			leaseB = l
			return true
		}
		return false
	})
	caughtUp := testutil.Eventually(t, "B to publish up to the head", 5*time.Minute, 50*time.Millisecond, func() bool {
		st, err := b.status()
		if err != nil {
			return false
		}
		bs, _ := boundary(st, "default")
		return bs.State == "leading" && bs.Published == head && bs.StreamLast == head && lastSeq() == head
	})
	if a.Exited() {
		t.Fatalf("%s exited while stopped:\n%s", a.Name, a.Tail(50))
	}
	logFrom := a.LineCount()
	t.Logf("%s took the lease (term %d) %s after the SIGSTOP and published up to the head %d %s after it",
		b.Name, leaseB.Term, took.Round(time.Millisecond), head, (took + caughtUp).Round(time.Millisecond))

	// Continue A: it publishes the rest of its batch into the shared
	// stream, which refuses every message; it steps down.
	continued := time.Now()
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var refused []string
	var reasonA string
	steppedDown := testutil.Eventually(t, "A to step down with its publishes refused", 60*time.Second, 20*time.Millisecond, func() bool {
		refused = tap.refusedSince(continued)
		if l := lastSeq(); l > head {
			// Nothing is appended meanwhile: only A publishes past it.
			t.Fatalf("I2/I6: the stream took A's stale publishes after the SIGCONT: its last sequence is %d, the store's head %d "+
				"(%d refusals seen)", l, head, len(refused))
		}
		st, err := a.status()
		if err != nil {
			return false
		}
		bs, _ := boundary(st, "default")
		reasonA = string(bs.State) + ": " + bs.Reason
		return len(refused) > 0 && bs.State == "standby"
	})
	var saidA []string
	for _, line := range a.LinesFrom(logFrom) {
		if strings.Contains(line, "component=publisher") || strings.Contains(line, "component=lease") {
			saidA = append(saidA, line)
		}
	}
	t.Logf("%s continued: %d of its publishes refused by the stream, the first %s; its status %q %s after the SIGCONT; "+
		"its publisher and lease said:\n%s", a.Name, len(refused), refused[0], reasonA, steppedDown.Round(time.Millisecond),
		strings.Join(saidA[:min(len(saidA), 20)], "\n"))
	// It stepped down by its lease loop (the renewal refused, or its own
	// clock past the lease), and stands by for B.
	steppedLog := false
	for _, line := range saidA {
		steppedLog = steppedLog || strings.Contains(line, "component=lease") && strings.Contains(line, "stepping down")
	}
	if !steppedLog || !strings.Contains(reasonA, b.Name+"#") && !strings.Contains(reasonA, "lease lost") {
		t.Fatalf("%s did not step down for %s after the SIGCONT: status %q, stepping down logged: %v", a.Name, b.Name, reasonA, steppedLog)
	}
	for _, r := range refused {
		// Every refused publish was one A had read before the stop, past
		// what the stream held then and within the batch it was sending.
		var pos, expect uint64
		if _, err := fmt.Sscanf(r, "position %d (expected last sequence %d)", &pos, &expect); err != nil {
			t.Fatalf("refusal %q: %v", r, err)
		}
		if expect != pos-1 || pos <= atStop || pos > batchEnd {
			t.Fatalf("a refused publish after the SIGCONT, %s, is not one of A's batch %d..%d", r, atStop+1, batchEnd)
		}
	}
	if got := lastSeq(); got != head {
		t.Fatalf("I2/I6: the stream's last sequence is %d after A's stale publishes; want the head %d", got, head)
	}

	// B keeps leading and publishes what is appended now.
	head = appendBacklog(t, store, 500, "after")
	testutil.Eventually(t, "B to publish the new events", 2*time.Minute, 50*time.Millisecond, func() bool {
		st, err := b.status()
		if err != nil {
			return false
		}
		bs, _ := boundary(st, "default")
		return bs.State == "leading" && bs.Published == head && lastSeq() == head
	})
	if l, err := store.LeaseHolder(dbCtx(), "default"); err != nil || l.Holder != leaseB.Holder || l.Term != leaseB.Term {
		t.Fatalf("the lease is %+v (%v) at the end; want B's term %d kept", l, err, leaseB.Term)
	}
	if l := leading(nodes, "default"); len(l) != 1 || nodes[l[0]] != b {
		t.Fatalf("the nodes leading at the end are %v; want only %s", l, b.Name)
	}
	watch.halt()
	watch.mu.Lock()
	violation, maxCP, samples := watch.violation, watch.maxCP, watch.samples
	watch.mu.Unlock()
	if violation != "" {
		t.Fatalf("I3: %s", violation)
	}
	if cp, err := store.Checkpoint(dbCtx(), "default"); err != nil || cp != head {
		t.Fatalf("the checkpoint is %d (%v) at the end; want the head %d", cp, err, head)
	}
	checkStreamAgainstStore(t, js, store, head)
	t.Logf("the stream holds 1..%d, sequence = position = the store's event; the checkpoint (%d samples, up to %d) never went back "+
		"nor above the stream's last sequence", head, samples, maxCP)
}
