package orisun_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/stream"
)

// TestForgedStreamMessageNeverDelivered_I5: a message that someone else
// put into the stream at the next sequence, with orisun's position and
// epoch headers but a body that is no event, is never delivered and does
// not end the subscription: like any foreign message it sends the
// subscription back to the store, which delivers the real event at that
// position once it is committed.
func TestForgedStreamMessageNeverDelivered_I5(t *testing.T) {
	n := setup(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := n.Append(ctx, "default", events(3, "real", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	bs, err := n.Boundaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	epoch := bs[0].Epoch

	r := newRecorder(0)
	live := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var reasons []string
	stop := subscribe(t, n, "default", 0, r, orisun.SubscribeOptions{
		OnCaughtUp: func(uint64) { once.Do(func() { close(live) }) },
		OnFellBehind: func(_ uint64, reason string) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
		},
	})
	select {
	case <-live:
	case <-time.After(30 * time.Second):
		t.Fatal("the subscription did not go live")
	}

	// The forged message takes sequence 4 before orisun publishes position 4.
	js := jsOf(t, n)
	m := nats.NewMsg(stream.Subject("default", "real"))
	m.Header.Set(stream.HeaderPosition, "4")
	m.Header.Set(stream.HeaderEpoch, epoch)
	m.Header.Set(stream.HeaderEventID, "00000000-0000-7000-8000-000000000000")
	m.Data = []byte(`not an event`)
	if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(3)); err != nil {
		t.Fatalf("publishing the forged message: %v", err)
	}
	testutil.Eventually(t, "the subscription to meet the forged message and go back to the store", 30*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reasons) > 0
	})
	for i := 0; i < 3; i++ {
		if _, err := n.Append(ctx, "default", events(2, "real", 32), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDelivered(t, r, 9, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("the subscription ended with %v", err)
	}
	checkAgainstStore(t, n, "default", 0, r)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("fell back %d times, first: %s", len(reasons), reasons[0])
	if !strings.Contains(reasons[0], "sequence 4") {
		t.Fatalf("fell back with %q, want the reason to name sequence 4", reasons[0])
	}
}
