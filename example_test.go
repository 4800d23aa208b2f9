package orisun_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/nodetest"
)

// An embedded node on SQLite in a directory of its own, with its NATS
// server on a random port (NATSPort -1) and no HTTP listener (an embedded
// node gets none unless HTTPAddr is set): append, read, then subscribe from
// the start until the last event appended.
func Example() {
	dir, err := os.MkdirTemp("", "orisun-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	n, err := orisun.New(orisun.Config{DataDir: dir, NATSPort: -1})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer n.Stop()

	res, err := n.Append(ctx, "default", []orisun.Input{
		{Type: "order.placed", Data: json.RawMessage(`{"order":42}`), Tags: []string{"order:42"}},
		{Type: "order.paid", Data: json.RawMessage(`{"order":42,"amount":10}`), Tags: []string{"order:42"}},
		{Type: "order.shipped", Data: json.RawMessage(`{"order":42}`), Tags: []string{"order:42"}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("appended positions %d to %d\n", res.First, res.Last)

	_, events, err := n.Read(ctx, "default", 1, 10, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Printf("read %d %s %s\n", e.Position, e.Type, e.Data)
	}

	// The handler's return acknowledges the event; cancelling the context
	// ends the subscription.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = n.Subscribe(sctx, "default", 0, func(_ context.Context, e orisun.Event) error {
		fmt.Printf("delivered %d %s\n", e.Position, e.Type)
		if e.Position == res.Last {
			cancel()
		}
		return nil
	}, orisun.SubscribeOptions{})
	fmt.Println("subscription ended:", errors.Is(err, context.Canceled))
	// Output:
	// appended positions 1 to 3
	// read 2 order.paid {"order":42,"amount":10}
	// read 3 order.shipped {"order":42}
	// delivered 1 order.placed
	// delivered 2 order.paid
	// delivered 3 order.shipped
	// subscription ended: true
}

// A decision and its condition: read the latest event of an order, decide
// from it, and append under a condition on the same query after the head
// that was read. An event of the order appended in between makes the
// append fail with an *event.ConflictError; read again and decide again.
func ExampleNode_ReadLatest() {
	n, _, stop := nodetest.Start() // a node started as in Example
	defer stop()
	ctx := context.Background()

	order := orisun.Query{Items: []orisun.QueryItem{{Tags: []string{"order:7"}}}}
	placed := []orisun.Input{{Type: "order.placed", Data: json.RawMessage(`{"order":7}`), Tags: []string{"order:7"}}}
	if _, err := n.Append(ctx, "default", placed, nil); err != nil {
		log.Fatal(err)
	}

	latest, err := n.ReadLatest(ctx, "default", &order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("latest: %s at %d, head %d\n", latest.Event.Type, latest.Event.Position, latest.Head)

	// Someone else cancels the order meanwhile.
	cancelled := []orisun.Input{{Type: "order.cancelled", Data: json.RawMessage(`{"order":7}`), Tags: []string{"order:7"}}}
	if _, err := n.Append(ctx, "default", cancelled, nil); err != nil {
		log.Fatal(err)
	}

	// The decision taken from latest no longer holds: the append fails.
	shipped := []orisun.Input{{Type: "order.shipped", Data: json.RawMessage(`{"order":7}`), Tags: []string{"order:7"}}}
	_, err = n.Append(ctx, "default", shipped, &orisun.Condition{Query: order, After: latest.Head})
	var conflict *event.ConflictError
	if errors.As(err, &conflict) {
		fmt.Printf("conflict: an event of the order at position %d\n", conflict.Position)
	}
	// Output:
	// latest: order.placed at 1, head 1
	// conflict: an event of the order at position 2
}
