package publisher_test

// JetStream's fast-ingest batches (nats-server 2.14 and later, a stream
// with allow_batched): the publisher sends a page of messages with reply
// subjects that number them, and the server acknowledges every N of them
// (flow control) and the batch at its commit, instead of every message.
// This file measures what that would save the relay against its
// PublishMsgAsync window (BenchmarkPublishPage) and pins the server's
// behaviour such a relay would rely on for I2 and I6 (docs/design.md):
// each message's expected last sequence is still checked, and a refused
// message ends its batch, so that nothing is stored out of place
// (TestFastIngestChecksExpectedLastSequence). The relay does not use it
// yet (docs/performance.md, "Fast-ingest batches").

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

// fastIngestEnv is an embedded server with one memory stream that allows
// fast-ingest batches, and a connection to it.
type fastIngestEnv struct {
	nc *nats.Conn
	js jetstream.JetStream
	s  jetstream.Stream
}

func newFastIngestEnv(tb testing.TB) *fastIngestEnv {
	tb.Helper()
	ns := natstest.Server(tb, natsembed.Config{MaxMemory: 2 << 30})
	nc := natstest.Orisun(tb, ns, "fastingest")
	js := natstest.JetStream(tb, nc)
	cfg := stream.Config("b", "0190f7a2-0000-7000-8000-0000000000e0", stream.Limits{MaxBytes: 1 << 30, Batched: true}, 1)
	s, err := js.CreateStream(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &fastIngestEnv{nc: nc, js: js, s: s}
}

// message is the relay's message for position pos (its headers, a body of
// about 1 KB), expecting exp as the stream's last sequence.
func fastIngestMessage(tb testing.TB, pos, exp uint64) *nats.Msg {
	e := event.Event{ID: "0190f7a2-0000-7000-8000-000000000001", Boundary: "b", Epoch: "0190f7a2-0000-7000-8000-0000000000e0",
		Position: pos, Type: "t", Time: time.Unix(1_800_000_000, 0), Tags: []string{"customer:1"},
		Data: json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)}
	m, err := stream.Message(&e, false)
	if err != nil {
		tb.Fatal(err)
	}
	m.Header.Set(jetstream.ExpectedLastSeqHeader, fmt.Sprint(exp))
	return m
}

// fastIngestReply is the reply subject of message i (from 1) of a batch
// of n: <inbox>.<batch id>.<ack every>.<gap mode>.<i>.<operation>.$FI,
// the operation 0 for the first message, 2 (commit) for the last, else 1.
func fastIngestReply(inbox, id string, i, n int) string {
	op := 1
	switch {
	case i == n:
		op = 2
	case i == 1:
		op = 0
	}
	return fmt.Sprintf("%s.%s.%d.fail.%d.%d.$FI", inbox, id, 500, i, op)
}

// fastIngestReplyMsg is what the server answers on a batch's reply
// subjects: a flow acknowledgement ("type":"ack", every msgs messages up to
// seq), an error of a message ("type":"err"), or the batch's PubAck (the
// stream sequence of its last message) or error.
type fastIngestReplyMsg struct {
	Type  string `json:"type"`
	Seq   uint64 `json:"seq"`
	Msgs  uint64 `json:"msgs"`
	Error *struct {
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// publishFastIngest sends the page first..first+n-1 as one batch, keeping
// at most two flow windows unacknowledged, and returns the commit's
// PubAck sequence.
func publishFastIngest(tb testing.TB, env *fastIngestEnv, replies <-chan *nats.Msg, inbox, id string, first uint64, n int) uint64 {
	acked, every := 0, 10 // the server's first window is 10 messages
	for i := 1; i <= n; i++ {
		pos := first + uint64(i) - 1
		m := fastIngestMessage(tb, pos, pos-1)
		m.Reply = fastIngestReply(inbox, id, i, n)
		if err := env.nc.PublishMsg(m); err != nil {
			tb.Fatal(err)
		}
		for i < n && i-acked >= 2*every {
			var r fastIngestReplyMsg
			if err := json.Unmarshal((<-replies).Data, &r); err != nil || r.Error != nil {
				tb.Fatalf("batch %s at %d: %v %+v", id, i, err, r.Error)
			}
			if r.Type == "ack" {
				acked, every = int(r.Seq), max(int(r.Msgs), 1)
			}
		}
	}
	for {
		var r fastIngestReplyMsg
		if err := json.Unmarshal((<-replies).Data, &r); err != nil || r.Error != nil {
			tb.Fatalf("batch %s commit: %v %+v", id, err, r.Error)
		}
		if r.Type == "" {
			return r.Seq
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublishPage publishes pages of 1,000 relay messages of 1 KB
// into a memory stream, each message expecting the previous sequence, and
// awaits each page's acknowledgement before the next, as the simple relay
// loop does: with PublishMsgAsync (one PubAck per message), and as one
// fast-ingest batch per page. It reports messages/s and the process's CPU
// per message (server and client share it).
//
//	go test -run '^$' -bench BenchmarkPublishPage -benchtime 100x ./publisher/
func BenchmarkPublishPage(b *testing.B) {
	const page = 1000
	b.Run("async", func(b *testing.B) {
		env := newFastIngestEnv(b)
		ctx := context.Background()
		c0 := cpuTime()
		b.ResetTimer()
		futs := make([]jetstream.PubAckFuture, page)
		for k := range b.N {
			first := uint64(k*page) + 1
			for i := range page {
				pos := first + uint64(i)
				f, err := env.js.PublishMsgAsync(fastIngestMessage(b, pos, pos-1))
				if err != nil {
					b.Fatal(err)
				}
				futs[i] = f
			}
			for i, f := range futs {
				select {
				case ack := <-f.Ok():
					if ack.Sequence != first+uint64(i) {
						b.Fatalf("sequence %d, want %d", ack.Sequence, first+uint64(i))
					}
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		reportPages(b, ctx, env, page, cpuTime()-c0)
	})
	b.Run("fast_ingest", func(b *testing.B) {
		env := newFastIngestEnv(b)
		ctx := context.Background()
		inbox := nats.NewInbox()
		replies := make(chan *nats.Msg, 8192)
		sub, err := env.nc.ChanSubscribe(inbox+".>", replies)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		c0 := cpuTime()
		b.ResetTimer()
		for k := range b.N {
			first := uint64(k*page) + 1
			if seq := publishFastIngest(b, env, replies, inbox, fmt.Sprintf("p%d", k), first, page); seq != first+page-1 {
				b.Fatalf("batch acknowledged at %d, want %d", seq, first+page-1)
			}
		}
		b.StopTimer()
		reportPages(b, ctx, env, page, cpuTime()-c0)
	})
}

// reportPages checks that the stream holds every message at its sequence
// count and reports the rates.
func reportPages(b *testing.B, ctx context.Context, env *fastIngestEnv, page int, cpu time.Duration) {
	info, err := env.s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	n := uint64(b.N * page)
	if info.State.LastSeq != n || info.State.Msgs != n {
		b.Fatalf("stream holds %d messages up to %d, want %d", info.State.Msgs, info.State.LastSeq, n)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n)/1000, "cpu-µs/msg")
	b.ReportMetric(0, "ns/op")
}

// TestFastIngestChecksExpectedLastSequence pins what a fast-ingest relay
// would rely on for I2 and I6: the server checks each message's expected
// last sequence, a message that fails the check is refused with the
// wrong-last-sequence error and ends its batch (the messages after it are
// refused as of an unknown batch), and the messages before it stay,
// each at its own sequence.
func TestFastIngestChecksExpectedLastSequence(t *testing.T) {
	env := newFastIngestEnv(t)
	ctx := context.Background()
	for pos := uint64(1); pos <= 5; pos++ {
		if _, err := env.js.PublishMsg(ctx, fastIngestMessage(t, pos, pos-1)); err != nil {
			t.Fatal(err)
		}
	}
	inbox := nats.NewInbox()
	sub, err := env.nc.SubscribeSync(inbox + ".>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// try sends positions 6, 7, 8 as one batch with the expected last
	// sequences exp and returns the server's answers.
	try := func(id string, exp [3]uint64) []fastIngestReplyMsg {
		for i, e := range exp {
			m := fastIngestMessage(t, uint64(6+i), e)
			m.Reply = fastIngestReply(inbox, id, i+1, len(exp))
			if err := env.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		var out []fastIngestReplyMsg
		for {
			m, err := sub.NextMsg(500 * time.Millisecond)
			if err != nil {
				return out
			}
			var r fastIngestReplyMsg
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatalf("%s: %q: %v", id, m.Data, err)
			}
			out = append(out, r)
		}
	}
	lastSeq := func() uint64 {
		info, err := env.s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	wrongLast := func(rs []fastIngestReplyMsg) bool {
		for _, r := range rs {
			if r.Error != nil && r.Error.ErrCode == int(jetstream.JSErrCodeStreamWrongLastSequence) {
				return true
			}
		}
		return false
	}
	// A stale publisher: its first message expects 3, the stream is at 5.
	if rs := try("stale", [3]uint64{3, 6, 7}); !wrongLast(rs) {
		t.Errorf("a batch whose first message expects 3 on a stream at 5: answers %+v, want a wrong-last-sequence error", rs)
	}
	if got := lastSeq(); got != 5 {
		t.Fatalf("after the stale batch the stream ends at %d, want 5 (nothing stored out of place)", got)
	}
	// Its second message is out of place: the first is stored, the rest
	// refused.
	if rs := try("mid", [3]uint64{5, 9, 7}); !wrongLast(rs) {
		t.Errorf("a batch whose second message expects 9: answers %+v, want a wrong-last-sequence error", rs)
	}
	if got := lastSeq(); got != 6 {
		t.Fatalf("after the batch refused at its second message the stream ends at %d, want 6", got)
	}
	m, err := env.s.GetMsg(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(stream.HeaderPosition); got != "6" {
		t.Errorf("stream sequence 6 holds position %q, want 6 (I2)", got)
	}
}
