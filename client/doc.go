// Package client is the Go client of orisun's NATS API (docs/protocol.md):
// it appends, reads (forward, or newest first: ReadBackward), reads the latest matching event (ReadLatest, the
// context of a conditional append), lists and creates boundaries, reads the status, and
// subscribes to a boundary with exactly the semantics of the in-process
// subscription (docs/design.md §7, I5). It is part of orisun's stable public API
// (see package orisun), and it compiles none of the node: no store, no
// publisher, no embedded server.
//
// A subscription has those semantics because it runs the same state
// machine as the node's: catchup.Subscribe, with the API's read as its
// Reader and the boundary's JetStream stream, reached over the same NATS
// connection, as its live source.
//
//	c, err := client.Connect("nats://127.0.0.1:4222", client.Name("billing"))
//	defer c.Close()
//	res, err := c.Append(ctx, "default", []event.Input{{Type: "order.placed", Data: json.RawMessage(`{"order":42}`)}}, nil)
//	err = c.Subscribe(ctx, "default", saved, func(ctx context.Context, e event.Event) error { … }, client.SubscribeOptions{Epoch: savedEpoch})
//
// A subscription outlives NATS disconnections and relay restarts: the
// connection reconnects forever, reads that fail for a reason that may pass
// (unavailable, a timeout, no responders while the relay restarts) are
// retried with a growing pause inside the subscription, and the live phase
// falls back to reading whenever the stream cannot continue at the next
// position. It resumes from the last delivered position, without gap or
// duplicate. Only a handler error, an epoch change, an invalid start
// position, an unknown boundary or the end of ctx end it.
//
// Replies are checked before they are returned (ErrBadReply): an epoch
// must be a UUID other than the all-zero one, and the same as in this
// client's last reply for the boundary (a change is reported once, as
// ErrBadReply and event.ErrEpochChanged, then the new epoch is the one
// compared with); an append of n events must get n consecutive positions;
// a read's events must be the boundary's, in the reply's epoch, ascending
// after the requested position, at most the limit, at or below the head,
// matching the query, and, without a query, every position in turn.
//
// Whether the stream is fed is asked from the status endpoint (the
// boundary's publisher must be leading on the node the client is connected
// to); while it is not, the subscription reads the store through the API,
// so it makes progress even when the publisher is down.
package client
