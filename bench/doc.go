// Package bench is `orisun bench`: the standard workloads, the reference
// limits of the machine and the report. It is orisun's machinery, not for
// import by applications (run the command instead): its API may change
// without notice, and such a change is not a breaking change of orisun.
//
// It runs the standard workloads against an
// in-process Node on a fresh store (a temporary SQLite directory, or a fresh
// PostgreSQL database orisun_bench_<random> that it creates and drops), and
// measures, in the same run, the reference limits of the machine with
// orisun's code paths removed:
//
//   - raw insert: multi-row INSERTs of the same rows into a copy of the
//     events table (same keys and indexes), the limit of append;
//   - raw read: the range-read loop the relay and catch-up are built on
//     (SELECT … WHERE boundary = ? AND position > ? ORDER BY position LIMIT
//     page) over the backlog, the limit of catch-up and one limit of relay;
//   - raw publish: pipelined asynchronous JetStream publishes of the same
//     messages (subject, headers, body) into a fresh memory stream on the
//     node's own embedded server, the other limit of relay;
//   - raw relay: the simplest correct relay loop (a page from the store's
//     own page query, PublishMsgAsync of each event, every acknowledgement
//     awaited, the checkpoint moved), the relay's limit;
//   - raw e2e: a multi-row insert every millisecond, a notification (a
//     poll on SQLite), that loop and an ordered consumer, at each latency
//     rate, the latency rows' limit.
//
// The api workload drives the node as applications do: the Go client, in
// a process of its own (ClientMain, the orisun binary's hidden `bench
// api-client`), over loopback TCP, as the application principal.
//
// Each orisun figure is reported with its ratio to its limit. The report
// is text for people and JSON for tools (Report). The figures are
// measurements of one run on one machine; compare ratios within a run, not
// absolute numbers across machines or runs.
package bench
