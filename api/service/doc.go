// Package service runs orisun's NATS API inside a node: the micro service
// "orisun" on orisun.api.>, whose wire types, subjects and error codes are
// those of package api (docs/protocol.md). It is orisun's machinery, not
// for import by applications: its API may change without notice, and such
// a change is not a breaking change of orisun. Applications speak the
// protocol (package api) or use package client.
//
// The service runs on a Backend, a small interface the embedding Node
// implements, so the handlers know nothing of the node's internals and a
// later issue can serve the same API on other nodes.
//
// Each request is handled on a goroutine of its own (bounded): appends that
// arrive together must reach the store together to share a group commit,
// which a handler running on the subscription's single delivery goroutine
// would prevent. A request that is not answered within the request timeout
// is "unavailable": it may succeed when sent again.
package service
