// Package publisher relays one boundary's committed events, in position
// order, into the boundary's JetStream stream (docs/design.md §5).
// It is orisun's machinery, not for import by applications: its API may
// change without notice, and such a change is not a breaking change of
// orisun.
//
// A publisher runs only while its node holds the boundary's lease. Each run
// starts by comparing the stream with the store: a stream of another epoch is
// recreated; a stream holding this epoch's messages resumes at its last
// sequence + 1; an empty or lost stream is created or purged so that its next
// sequence is checkpoint + 1; a stream ahead of the store's head is
// recreated from the checkpoint when the sequences beyond the head are not
// orisun's (foreign messages), and otherwise stops the publisher with that
// reason (the store went back in time) instead of guessing.
//
// It then reads a batch from the store and publishes it pipelined, a bounded
// window in flight, every message with Nats-Expected-Last-Sequence set to
// position - 1. JetStream itself refuses a message that would land out of
// place, so stream sequence = position (I2) holds even when two publishers
// run at once (I6). Once every message of the batch is acknowledged, the
// checkpoint is written, monotonic and fenced by the lease term (I3). On any
// refusal or error nothing advances: the publisher backs off, re-reads the
// stream's state and resumes from there, so no position is ever skipped (I4).
//
// States: standby (not leading) → leading (publishing or caught up) →
// paused (JetStream refuses for its own limits) or stalled (anything else,
// with the reason) → leading again once a batch goes through. Each change is
// logged once with its reason.
//
// The stream's configuration is orisun's and its content the store's: the
// leading publisher checks its stream (one stream info request) when a node
// that lists every stream once per poll interval says it differs
// (StreamDrifted), and every CheckInterval anyway, idle or not. A setting
// someone changed is put back; what JetStream cannot undo in place, a
// missing or replaced stream, or a message beyond what it published is
// repaired by the sync, which recreates the stream from the checkpoint
// where it must (ConfigDrift, drift.go, check.go). A publish that finds no
// stream because the subjects changed names that cause. Every delete,
// purge, recreate and put-back renews the lease first (the fence), so a
// publisher that no longer leads changes nothing.
//
// A short page (fewer events than BatchSize) reached the head: the
// publisher is drained, and does not read again to confirm it. A wake-up
// pending when a read starts is taken first: one for a commit was sent
// after the commit, which that read sees; the others (StreamDrifted, and
// Behind for a head gone back) leave a flag acted on when the publisher
// next goes idle, where it probes a held head row too.
//
// When drained the publisher waits for a wake-up from the appender or the
// poll interval, whichever comes first; wake-ups are hints only. A node
// also reads every boundary's head in one statement per its poll interval
// and wakes the idle publishers that are behind (Behind), so each
// publisher's own poll can be a slow backstop: a thousand idle boundaries
// then cost one shared read a second plus one read per boundary per
// backstop (about 33 a second at a 30 s backstop; on PostgreSQL each also
// probes the head row), not a thousand reads a second.
//
// Config.AfterAck and Config.CheckpointBeforeAck are test seams, the fault
// points of the fault suite (a kill between acknowledgement and checkpoint;
// a relay broken on purpose): a node sets them only through
// internal/testhooks, and never in production.
package publisher
