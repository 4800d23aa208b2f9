package orisun_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/testhooks"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain lets the test binary run as a child process of the kill tests
// (testutil.StartChild): "relay" runs childMain, "mover" moverChildMain,
// instead of the tests.
func TestMain(m *testing.M) {
	testutil.Children(map[string]func() int{"relay": childMain, "mover": moverChildMain})
	testutil.Main(m)
}

// childMain runs a node on ORISUN_DATA_DIR that appends batches, subscribes
// from 0, and reports on stdout: "delivered P" after the handler took P,
// and "acked P" when a batch up to P is acknowledged but not yet
// checkpointed; at the ORISUN_TEST_HANG_AT-th acknowledgement it hangs there
// so that the parent can kill it between acknowledgement and checkpoint.
func childMain() int {
	hangAt, _ := strconv.Atoi(os.Getenv("ORISUN_TEST_HANG_AT"))
	out := bufio.NewWriter(os.Stdout)
	lines := make(chan string, 1024)
	go func() {
		for l := range lines {
			out.WriteString(l + "\n")
			out.Flush()
		}
	}()
	acks := 0
	n, err := orisun.New(orisun.Config{
		DataDir:      os.Getenv("ORISUN_DATA_DIR"),
		NATSPort:     -1,
		PublishBatch: 100,
		PollInterval: 20 * time.Millisecond,
	}, testhooks.Option[orisun.Option](testhooks.Hooks{AfterAck: func(_ string, last uint64) {
		acks++
		lines <- fmt.Sprintf("acked %d", last)
		if acks == hangAt {
			time.Sleep(time.Hour)
		}
	}}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		err := n.Subscribe(ctx, "default", 0, func(_ context.Context, e orisun.Event) error {
			lines <- fmt.Sprintf("delivered %d", e.Position)
			return nil
		}, orisun.SubscribeOptions{})
		fmt.Fprintln(os.Stderr, "subscription:", err)
	}()
	for i := 0; ; i++ {
		if _, err := n.Append(ctx, "default", events(50, "kill.test", 128), nil); err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			return 1
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKilledBetweenAckAndCheckpoint_I3_I4_I5: a real relay process is killed
// with SIGKILL after JetStream acknowledged a batch and before its
// checkpoint was written. Started again on the same directory, the relay
// republishes from checkpoint+1 with sequence = position, skips nothing, and
// a subscriber resuming from the last position the killed process delivered
// gets every later position exactly once.
func TestKilledBetweenAckAndCheckpoint_I3_I4_I5(t *testing.T) {
	dir := t.TempDir()
	child := testutil.StartChild(t, "relay child", "relay", "ORISUN_DATA_DIR="+dir, "ORISUN_TEST_HANG_AT=15")

	var delivered, acked, hungAt uint64
	deadline := time.AfterFunc(60*time.Second, func() { child.Signal(syscall.SIGKILL) })
	acks := 0
	for {
		line, ok := child.NextLine(t, 2*time.Minute)
		if !ok {
			break
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		p, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "delivered":
			if p != delivered+1 {
				t.Fatalf("child delivered %d after %d", p, delivered)
			}
			delivered = p
		case "acked":
			acked = p
			acks++
		}
		if acks == 15 && hungAt == 0 {
			hungAt = acked
			// Let the subscription take some of what is in the stream,
			// then kill: the batch up to hungAt is acknowledged, its
			// checkpoint not written.
			time.Sleep(200 * time.Millisecond)
			if err := child.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline.Stop()
	if hungAt == 0 {
		t.Fatalf("the child never reached the fault point; its output:\n%s", child.Tail(50))
	}
	t.Logf("killed with batch up to %d acknowledged and not checkpointed; subscriber at %d", hungAt, delivered)

	cp := checkpointOf(t, dir, "default")
	if cp >= hungAt {
		t.Fatalf("checkpoint %d at or past the batch %d whose checkpoint was never written", cp, hungAt)
	}
	n := setup(t, dir, nil)
	st := waitSettled(t, n, 60*time.Second)
	b := st.Boundaries[0]
	if b.Head < hungAt {
		t.Fatalf("head %d below the acknowledged position %d: acknowledged appends were lost", b.Head, hungAt)
	}
	first, last := checkStream(t, n, "default")
	if first != cp+1 || last != b.Head {
		t.Fatalf("stream after restart holds %d..%d; it must republish from checkpoint+1 (%d) to the head %d",
			first, last, cp+1, b.Head)
	}
	r := newRecorder(delivered)
	stop := subscribe(t, n, "default", delivered, r, orisun.SubscribeOptions{})
	waitDelivered(t, r, b.Head, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAgainstStore(t, n, "default", delivered, r)
}
