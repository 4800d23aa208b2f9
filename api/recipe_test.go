package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// TestProtocolRecipe_I5 follows docs/protocol.md §3 with a plain NATS
// client (no orisun client code): read pages until the head, check the
// stream's epoch and first sequence, then an ordered consumer from next,
// checking Orisun-Position = next, while appends continue. Every position
// arrives once, in order.
func TestProtocolRecipe_I5(t *testing.T) {
	t.Parallel()
	_, nc := setup(t)
	appendN := func(k int) {
		var evs []string
		for i := 0; i < k; i++ {
			evs = append(evs, fmt.Sprintf(`{"type":"recipe","data":{"i":%d}}`, i))
		}
		// Not t.Fatal: it also runs on a goroutine of its own.
		msg, err := nc.Request("orisun.api.append.default", []byte(`{"events":[`+join(evs)+`]}`), 10*time.Second)
		if err != nil {
			t.Errorf("append: %v", err)
		} else if msg.Header.Get(api.ErrorCodeHeader) != "" {
			t.Errorf("append: %s", msg.Data)
		}
	}
	for i := 0; i < 5; i++ {
		appendN(100)
	}
	var epoch string
	next := uint64(1)
	// 1. Catch up.
	for {
		var rd api.ReadReply
		ok(t, nc, "orisun.api.read.default", fmt.Sprintf(`{"after":%d,"limit":1000}`, next-1), &rd)
		if epoch == "" {
			epoch = rd.Epoch
		}
		for _, e := range rd.Events {
			if e.Position != next {
				t.Fatalf("read position %d, want %d", e.Position, next)
			}
			next++
		}
		if len(rd.Events) == 0 || rd.Events[len(rd.Events)-1].Position == rd.Head {
			break
		}
	}
	if next != 501 {
		t.Fatalf("caught up to %d", next-1)
	}
	js := natstest.JetStream(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 2. Can the stream continue at next? (Wait for the publisher.)
	for {
		s, err := js.Stream(ctx, "ORISUN_default")
		if err == nil {
			info := s.CachedInfo()
			first := info.State.FirstSeq
			if info.State.Msgs == 0 {
				first = info.State.LastSeq + 1
			}
			if info.Config.Metadata["orisun_epoch"] == epoch && first <= next && info.State.LastSeq+1 >= next {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the stream never reached the catch-up position")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 3. Live, while appends continue.
	cons, err := js.OrderedConsumer(ctx, "ORISUN_default", jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next})
	if err != nil {
		t.Fatal(err)
	}
	it := natstest.Messages(t, cons)
	// The last append's reply may come after its events reach the
	// consumer: wait for it before the connection closes with the test.
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for i := 0; i < 5; i++ {
			appendN(100)
		}
	}()
	defer func() { <-appended }()
	for next <= 1000 {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("at %d: %v", next, err)
		}
		pos, _ := strconv.ParseUint(msg.Headers().Get("Orisun-Position"), 10, 64)
		md, _ := msg.Metadata()
		if msg.Headers().Get("Orisun-Epoch") != epoch || pos != next || md.Sequence.Stream != pos {
			t.Fatalf("live message at sequence %d: position %d, want %d", md.Sequence.Stream, pos, next)
		}
		var e event.Event
		if err := json.Unmarshal(msg.Data(), &e); err != nil || e.Position != pos || e.Type != "recipe" {
			t.Fatalf("body %s: %v", msg.Data(), err)
		}
		next++
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
