// Package testhooks holds the test seams of an orisun Node, kept out of the
// public API so that go doc of package orisun shows none of them (the way
// grpc-go keeps such hooks in its internal package). It is orisun's
// machinery, not for import by applications (being internal, it cannot
// be): its API may change without notice.
//
// Its users are the tests, the fault suite (internal/faults) and the
// binary built with -tags faultinject (cmd/orisun/faultinject.go):
//
//	n, err := orisun.New(cfg, testhooks.Option[orisun.Option](testhooks.Hooks{
//		AfterAck: func(boundary string, last uint64) { … },
//	}))
//
// Production code never sets a hook.
package testhooks

import "github.com/orisun-io/orisun/backend"

// Hooks are the fault points of a Node. The zero value sets none; an
// option with some hooks leaves the others as they are.
type Hooks struct {
	// AfterAck is called after each fully acknowledged batch of a
	// boundary and before its checkpoint is written.
	AfterAck func(boundary string, last uint64)
	// CheckpointBeforeAck makes every publisher write each batch's
	// checkpoint before publishing the batch: a deliberately broken relay,
	// for the fault suite's negative control of C6 only.
	CheckpointBeforeAck bool
	// WrapStore wraps the store the node opens (to record every checkpoint
	// write, say). The wrapper must keep the store's promises.
	WrapStore func(backend.Store) backend.Store
	// PermissionsOff switches the embedded NATS server's permission model
	// off when no credentials are configured: a client that connects
	// without credentials may then do anything (publish into the event
	// subjects, answer the API, change the streams), as before the model
	// was always on. For the negative control of the forged-event test
	// (docs/test-plan.md S13) and for measuring what the model costs only.
	PermissionsOff bool
	// BeforeStreamMeasured is called by Node.Status for each boundary
	// after the store was read and before the boundary's stream is (to
	// have an append published in between, say).
	BeforeStreamMeasured func(boundary string)
	// InstrumentationOff runs the node without its counters, histograms
	// and store watch (internal/metrics, the node's storewatch.go), as
	// before they existed: /metrics has the gauges only, and a store whose
	// writes fail is not reported unless its reads fail. For measuring
	// what the instrumentation costs only (BenchmarkAPIMetrics).
	InstrumentationOff bool
	// BeforeMoveCommit is called inside each transaction that moves a
	// boundary's staged events into the log (PostgreSQL's orisun_enqueue),
	// after the move and before the commit, with the positions the events
	// took (first > last: none): the fault point of the mover's kill test.
	BeforeMoveCommit func(boundary string, first, last uint64)
}

// NATSPermissionsOff is a func(*natsembed.Config) that sets a server
// configuration's permissionsOff, set by package natsembed when it is
// initialised. It is an any because package natsembed imports this one;
// package orisun asserts its type.
var NATSPermissionsOff any

// NodeOption is a func(Hooks) orisun.Option, set by package orisun when it
// is initialised. It is an any because package orisun imports this one;
// use Option, which asserts its type.
var NodeOption any

// Option returns the orisun.Option that installs h on a Node. O is
// orisun.Option, which this package cannot name.
func Option[O any](h Hooks) O {
	f, ok := NodeOption.(func(Hooks) O)
	if !ok {
		panic("testhooks: NodeOption is not a func(Hooks) orisun.Option (is package orisun linked in, and O orisun.Option?)")
	}
	return f(h)
}
