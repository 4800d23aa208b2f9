package orisun

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

// TestStatusStreamNotListed (I7): a stream listing that succeeded but
// skipped a stream (it pages by offset in name order: a stream deleted
// between two pages moves one stream of the next page out of both) does
// not make the status report that stream missing, with first and last 0:
// a boundary the listing did not name is read on its own, and only a
// stream that read does not find is missing.
func TestStatusStreamNotListed(t *testing.T) {
	ctx := context.Background()
	ns := natstest.Server(t, natsembed.Config{})
	nc := natstest.Orisun(t, ns, "test")
	js := natstest.JetStream(t, nc)
	cfg := stream.Config("b", "ep1", stream.Limits{}, 0)
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, stream.Subject("b", "t"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	listed := listStreams(ctx, js)
	if listed["b"] == nil {
		t.Fatalf("the listing lacks stream b: %v", listed)
	}
	skipped := map[string]*jetstream.StreamInfo{} // a listing that succeeded and skipped b
	// With many boundaries unlisted (every stream gone, as after a
	// memory-storage NATS restarted), each is still read, a few at once.
	all := []BoundaryStatus{{Name: "b"}, {Name: "gone"}}
	for i := range 3 * unlistedReaders {
		all = append(all, BoundaryStatus{Name: fmt.Sprintf("gone%d", i)})
	}
	unlisted := readUnlisted(ctx, js, skipped, all)
	if len(unlisted) != len(all) {
		t.Fatalf("%d streams read on their own, want %d", len(unlisted), len(all))
	}
	bst := &all[0]
	info, err := streamOf(skipped, unlisted, bst)
	if err != nil || info == nil || bst.StreamFirst != 1 || bst.StreamLast != 3 || bst.StreamMsgs != 3 {
		t.Fatalf("a stream the listing skipped: info %v, err %v, first %d last %d msgs %d; want it read on its own (1–3)",
			info != nil, err, bst.StreamFirst, bst.StreamLast, bst.StreamMsgs)
	}
	for i := range all[1:] {
		gone := &all[1+i]
		if info, err := streamOf(skipped, unlisted, gone); err != nil || info != nil || gone.StreamLast != 0 {
			t.Fatalf("stream %s that does not exist: info %v, err %v; want missing, no error", gone.Name, info != nil, err)
		}
	}
}
