package orisun_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// TestStreamLayoutOnTheServer_I2: the stream a node creates for a boundary
// is the public contract of docs/design.md §6, read back from the running NATS
// server: its name and subjects, memory storage, limits retention that
// discards old messages, the configured limits (ORISUN_NATS_EVENT_STREAM_*),
// one replica, the boundary's epoch in its metadata, fast-ingest batches
// allowed; and a published event
// sits on orisun.events.<boundary>.<type> with the §6 headers, at the
// sequence of its position. Nats-Msg-Id is absent by default and the event
// id with ORISUN_NATS_MSG_ID.
func TestStreamLayoutOnTheServer_I2(t *testing.T) {
	for _, msgID := range []bool{false, true} {
		t.Run("msgid="+strconv.FormatBool(msgID), func(t *testing.T) { testStreamLayout(t, msgID) })
	}
}

func testStreamLayout(t *testing.T, msgID bool) {
	n := setup(t, "", func(c *orisun.Config) {
		c.Boundaries = []string{"orders"}
		c.EventStreamMaxBytes = 8 << 20
		c.EventStreamMaxMsgs = 5000
		c.EventStreamMaxAge = 90 * time.Second
		c.MsgID = msgID
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustAppend(t, ctx, n, "orders", events(3, "order.placed.v2", 64))
	waitSettled(t, n, 30*time.Second)
	bs, err := n.Boundaries(ctx)
	if err != nil || len(bs) != 1 {
		t.Fatalf("boundaries %+v, %v", bs, err)
	}
	epoch := bs[0].Epoch

	js := jsOf(t, n)
	s, err := js.Stream(ctx, "ORISUN_orders")
	if err != nil {
		t.Fatalf("stream ORISUN_orders: %v", err)
	}
	info := natstest.Info(t, s)
	c := info.Config
	if len(c.Subjects) != 1 || c.Subjects[0] != "orisun.events.orders.>" {
		t.Errorf("subjects %v, want [orisun.events.orders.>]", c.Subjects)
	}
	if c.Storage != jetstream.MemoryStorage || c.Retention != jetstream.LimitsPolicy || c.Discard != jetstream.DiscardOld {
		t.Errorf("storage %v, retention %v, discard %v; want memory, limits, old", c.Storage, c.Retention, c.Discard)
	}
	if c.MaxBytes != 8<<20 || c.MaxMsgs != 5000 || c.MaxAge != 90*time.Second || c.Replicas != 1 {
		t.Errorf("max bytes %d, msgs %d, age %v, replicas %d; want the configured 8 MiB, 5000, 1m30s, 1",
			c.MaxBytes, c.MaxMsgs, c.MaxAge, c.Replicas)
	}
	if got := c.Metadata[stream.MetaEpoch]; got != epoch {
		t.Errorf("stream metadata epoch %q, want the boundary's %q", got, epoch)
	}
	// The embedded server (JetStream API level 4 or more) takes
	// fast-ingest batches: the publisher sends a backlog in them
	// (docs/design.md §5).
	if !c.AllowBatchPublish {
		t.Errorf("allow_batched off on a server that takes batches")
	}
	if info.State.FirstSeq != 1 || info.State.LastSeq != 3 {
		t.Errorf("stream holds %d..%d, want 1..3", info.State.FirstSeq, info.State.LastSeq)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if m.Subject != "orisun.events.orders.order.placed.v2" {
			t.Errorf("message %d on %q, want orisun.events.orders.order.placed.v2", seq, m.Subject)
		}
		h := m.Header
		if h.Get(stream.HeaderPosition) != strconv.FormatUint(seq, 10) || h.Get(stream.HeaderEpoch) != epoch ||
			h.Get(stream.HeaderType) != "order.placed.v2" || h.Get(stream.HeaderEventID) == "" {
			t.Errorf("message %d headers %v", seq, h)
		}
		if ids := h.Values(nats.MsgIdHdr); msgID && (len(ids) != 1 || ids[0] != h.Get(stream.HeaderEventID)) || !msgID && len(ids) != 0 {
			t.Errorf("message %d headers %v", seq, h)
		}
		if _, err := time.Parse(time.RFC3339Nano, h.Get(stream.HeaderTime)); err != nil {
			t.Errorf("message %d: %s %q: %v", seq, stream.HeaderTime, h.Get(stream.HeaderTime), err)
		}
	}
}
