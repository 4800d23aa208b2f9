// Package orisun is the embedding API: a Node opens the store, starts the
// embedded NATS server, runs one lease-holding publisher per boundary and
// serves appends, reads and catch-up-then-live subscriptions in-process, and
// to any NATS client through the micro service "orisun" (docs/protocol.md).
// It is part of orisun's stable public API, described below.
//
//	n, err := orisun.New(orisun.Config{DataDir: "./data"})
//	if err := n.Start(ctx); err != nil { … }
//	defer n.Stop()
//	res, err := n.Append(ctx, "default", []orisun.Input{{Type: "order.placed", Data: json.RawMessage(`{"id":1}`)}}, nil)
//	err = n.Subscribe(ctx, "default", 0, func(ctx context.Context, e orisun.Event) error { … }, orisun.SubscribeOptions{})
//
// The domain types (Event, Input, Query, Condition, …) are aliases of those
// of package event, under the same names, so that an embedding program needs
// one import. Config holds what an operator sets (each field has its
// ORISUN_* variable, README.md); Options (WithLogger, WithVersion) hold what
// the embedding program hands over.
//
// # The public API
//
// An application may rely on these packages, and on them only:
//
//	orisun      this package: the embedded node
//	client      the Go client of the NATS API
//	event       the domain types, their validation and the sentinel errors
//	checkpoint  effectively-once consumers: state and (epoch, position) in one transaction
//	outbox      appends from the application's own PostgreSQL transaction (pgx, database/sql)
//	api         the wire types of the NATS API: subjects, bodies, error codes
//	stream      the JetStream layout: stream names, subjects, headers, body
//	status      the status document and the readiness judgement
//
// They follow semantic versioning: an incompatible change to what they
// export, or to the wire formats they describe (the API's JSON, the stream
// layout, the status document), is a breaking change. None of them exposes
// a type of a machinery package, and apart from this one none compiles the
// store, the publisher or the embedded server into an application's build.
//
// Every other package is orisun's machinery (publisher, lease, catchup,
// natsembed, migrations, bench, backend and its backends, api/service,
// status/statushttp, internal/…). It is importable because the command and
// the tests need it, not for applications: its API may change without
// notice, and such a change is not a breaking change of orisun. Each says so
// in its doc. The environment variables and the output of the orisun
// command are a contract of their own (README.md).
package orisun
