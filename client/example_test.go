package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil/nodetest"
)

// A client of a node's NATS API. The node runs in this process only so that
// the example has one to talk to; an application would connect to the URL
// of a running orisun instead.
func Example() {
	n, _, stop := nodetest.Start()
	defer stop()
	ctx := context.Background()

	c, err := client.Connect(n.NATSURL(), client.Name("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Give ids when a request may be sent again: the retry of an append
	// with the same ids and content appends nothing.
	res, err := c.Append(ctx, "default", []event.Input{
		{ID: "0190b0a0-0000-7000-8000-000000000001", Type: "seat.booked", Data: json.RawMessage(`{"seat":1}`), Tags: []string{"seat:1"}},
		{ID: "0190b0a0-0000-7000-8000-000000000002", Type: "seat.booked", Data: json.RawMessage(`{"seat":2}`), Tags: []string{"seat:2"}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("appended positions %d to %d\n", res.First, res.Last)

	page, err := c.Read(ctx, "default", 0, 100, &event.Query{Items: []event.QueryItem{{Tags: []string{"seat:2"}}}})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Events {
		fmt.Printf("read %d %s %s (head %d)\n", e.Position, e.Type, e.Data, page.Head)
	}

	// Subscribe from the start; the handler's return acknowledges the
	// event, and cancelling the context ends the subscription.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = c.Subscribe(sctx, "default", 0, func(_ context.Context, e event.Event) error {
		fmt.Printf("delivered %d %s\n", e.Position, e.Data)
		if e.Position == res.Last {
			cancel()
		}
		return nil
	}, client.SubscribeOptions{})
	fmt.Println("subscription ended:", errors.Is(err, context.Canceled))
	// Output:
	// appended positions 1 to 2
	// read 2 seat.booked {"seat":2} (head 2)
	// delivered 1 {"seat":1}
	// delivered 2 {"seat":2}
	// subscription ended: true
}

// The log newest first, a page at a time: each page reads below the last
// position of the one before, until a page is empty.
func ExampleClient_ReadBackward() {
	c, stop := connected()
	defer stop()
	ctx := context.Background()
	for seat := 1; seat <= 5; seat++ {
		in := []event.Input{{Type: "seat.booked", Data: json.RawMessage(fmt.Sprintf(`{"seat":%d}`, seat))}}
		if _, err := c.Append(ctx, "default", in, nil); err != nil {
			log.Fatal(err)
		}
	}

	before := uint64(0) // 0: from the head
	for {
		page, err := c.ReadBackward(ctx, "default", before, 2, nil)
		if err != nil {
			log.Fatal(err)
		}
		if len(page.Events) == 0 {
			break
		}
		for _, e := range page.Events {
			fmt.Printf("%d %s\n", e.Position, e.Data)
		}
		before = page.Events[len(page.Events)-1].Position
	}
	// Output:
	// 5 {"seat":5}
	// 4 {"seat":4}
	// 3 {"seat":3}
	// 2 {"seat":2}
	// 1 {"seat":1}
}

// connected starts a node and connects a client to it as Example does, for
// the examples that show what comes after. stop closes the client and stops
// the node.
func connected() (c *client.Client, stop func()) {
	n, _, stopNode := nodetest.Start()
	c, err := client.Connect(n.NATSURL(), client.Name("example"))
	if err != nil {
		stopNode()
		log.Fatal(err)
	}
	return c, func() {
		c.Close()
		stopNode()
	}
}
