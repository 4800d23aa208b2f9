package natsembed_test

import (
	"context"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

// TestReplyAimedAtJetStreamAPIActsOnNothing_S13: NATS does not check the
// reply subject a client names (docs/security.md, "A known gap"), so an
// application can have the server answer one of its JetStream requests on
// a JetStream API subject that it may not publish to itself: a stream's
// delete, purge, message delete or update. JetStream must not take such an
// answer for a request: the stream keeps its messages and configuration.
// The control shows each request is answered, on a reply subject the test
// reads, so a stream left alone is not a request that never ran.
func TestReplyAimedAtJetStreamAPIActsOnNothing_S13(t *testing.T) {
	s := natstest.Server(t, natsembed.Config{})
	orisun := natstest.Orisun(t, s, "orisun")
	js := natstest.JetStream(t, orisun)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := stream.Name("default")
	st, err := js.CreateStream(ctx, stream.Config("default", "epoch-1", stream.Limits{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, stream.Subject("default", "x"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	app := natstest.Connect(t, s.ClientURL()) // no credentials: the application principal
	control, err := app.SubscribeSync("_INBOX.control")
	if err != nil {
		t.Fatal(err)
	}
	requests := []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + name, "$JS.API.STREAM.MSG.GET." + name}
	targets := []string{
		"$JS.API.STREAM.DELETE." + name,
		"$JS.API.STREAM.PURGE." + name,
		"$JS.API.STREAM.MSG.DELETE." + name,
		"$JS.API.STREAM.UPDATE." + name,
	}
	for _, req := range requests {
		body := []byte(`{"seq":1}`)
		if err := app.PublishRequest(req, "_INBOX.control", body); err != nil {
			t.Fatal(err)
		}
		if _, err := control.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("control: %s was not answered: %v", req, err)
		}
		for _, target := range targets {
			if err := app.PublishRequest(req, target, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A last answered request behind them shows the server took the
	// requests; JetStream answers API requests on worker goroutines,
	// though, so an answer may still be on its way (and a request it made
	// of one still to act): the stream is watched for a second.
	if err := app.PublishRequest("$JS.API.INFO", "_INBOX.control", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := control.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	reads := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s after the replies: %v", name, err)
		}
		if info.State.Msgs != 3 || info.State.FirstSeq != 1 || info.State.LastSeq != 3 {
			t.Fatalf("stream %s holds %d messages, %d..%d after the replies, want 3, 1..3", name, info.State.Msgs,
				info.State.FirstSeq, info.State.LastSeq)
		}
		if got := info.Config.Subjects; len(got) != 1 || got[0] != stream.Subjects("default") {
			t.Fatalf("stream %s subjects %v after the replies", name, got)
		}
		reads++
	}
	if reads < 5 {
		t.Fatalf("the stream was read %d times in a second: the watch shows nothing", reads)
	}
}
