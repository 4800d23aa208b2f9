// Package api is orisun's public NATS door (DESIGN §11): a NATS micro
// service named "orisun" that serves appends, reads, read-latest (the
// context of a decision), the boundary list and the status as JSON request/reply on orisun.api.>. Any NATS client can use
// it; docs/protocol.md is its reference.
//
// The service runs on a Backend, a small interface the embedding Node
// implements, so the handlers know nothing of the node's internals and a
// later issue can serve the same API on other nodes.
//
// Each request is handled on a goroutine of its own (bounded): appends that
// arrive together must reach the store together to share a group commit,
// which a handler running on the subscription's single delivery goroutine
// would prevent.
//
// Errors carry the micro error headers (Nats-Service-Error-Code, numeric;
// Nats-Service-Error, the message) and the body
// {"error":{"code":…,"message":…}}, with "position" added to the conflict of
// a failed append condition (an *event.ConflictError). The code comes from the sentinel errors of
// package event (errors.Is); a request the handler cannot understand is
// "invalid", and nothing is ever written for a request that fails
// validation. Two choices where the design is silent:
//
//   - unknown JSON fields are refused ("invalid", naming the field): a
//     misspelt "condition" must never turn a conditional append into an
//     unconditional one, nor a misspelt "after" a read from the start;
//   - a read whose "after" is past the boundary's head is "invalid" and the
//     message names the head: a reader cannot be ahead of the log, so its
//     saved position belongs to another store or epoch.
package api
