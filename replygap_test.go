package orisun_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/stream"
)

// TestReplySubjectGap_S13_I5_I7: NATS checks what a client publishes, not
// the reply subject it names (docs/security.md, "A known gap"). An
// application principal, with the default configuration, sends a request it
// may send ($JS.API.INFO) with a reply subject inside the boundary's stream:
// if the server's answer lands there, the relay must find the message
// beyond the head and repair the stream within a poll interval (the drift
// check, docs/operations.md "Stream drift"), and the stream must then hold
// exactly the store's events (I2), with the status never settled while it
// held more (I7).
func TestReplySubjectGap_S13_I5_I7(t *testing.T) {
	n := setup(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	appendSettled(t, ctx, n, events(3, "real", 32), 30*time.Second)

	app := natstest.Connect(t, n.NATSURL()) // no credentials: the application principal
	if err := app.PublishRequest("$JS.API.INFO", "orisun.events.default.gap", nil); err != nil {
		t.Fatal(err)
	}
	if err := app.Flush(); err != nil {
		t.Fatal(err)
	}

	js := jsOf(t, n)
	last := func() uint64 {
		s, err := js.Stream(ctx, stream.Name("default"))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0 // between the delete and the create of a repair
		}
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.LastSeq
	}
	// Give the answer time to land (the repair may follow at once).
	landed, unsettled := false, 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !landed; time.Sleep(2 * time.Millisecond) {
		landed = last() > 3
	}
	// Watch the status until the stream holds only the store's events: every
	// report that saw a stream beyond the head must not be settled.
	testutil.Eventually(t, "the stream to hold only the store's 3 events", 30*time.Second, 5*time.Millisecond, func() bool {
		st := testutil.Get(t, n.Status)
		b := st.Boundaries[0]
		if b.StreamLast > b.Head {
			landed = true
			if st.Settled {
				t.Fatalf("status settled with stream_last %d beyond the head %d (I7)", b.StreamLast, b.Head)
			}
			unsettled++
		}
		return last() == 3 && b.StreamLast == 3
	})
	checkStream(t, n, "default")
	if landed {
		t.Logf("the JetStream reply landed in the stream beyond the head (the gap is real); %d status reads were not settled, then it was repaired", unsettled)
	} else {
		t.Logf("the JetStream reply did not land in the stream on this server")
	}
}
