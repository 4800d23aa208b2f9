// Package sqlite is the SQLite backend of orisun: one database file,
// Dir/orisun.db, owned by one process (an exclusive flock on Dir/LOCK, see
// internal/datadir; a node takes it and hands it over in Config.Lock), in WAL
// mode so readers never wait for the writer. It implements backend.Store.
// The node opens it from its configuration (ORISUN_BACKEND=sqlite). It is
// orisun's machinery, not for import by applications: its API may change
// without notice, and such a change is not a breaking change of orisun.
//
// # The write path
//
// SQLite has one writer at a time, so the store keeps exactly one write
// connection and one writer goroutine, and gets its throughput from group
// commit rather than from concurrent transactions. Append hands its request
// to the writer over an unbuffered channel and waits. The writer takes the
// first waiting request, then drains every other request waiting at that
// moment, without sleeping (a lone append commits at once), up to
// GroupMaxEvents events, and runs the whole group in one BEGIN IMMEDIATE
// transaction with one COMMIT, so one fsync serves many appends.
//
// Inside the group transaction each request runs in its own SAVEPOINT: ids
// already stored (an idempotent retry returns the stored positions and writes
// nothing; other content is ErrConflict), then the condition (the first
// event after its position that matches its query fails the request with an
// *event.ConflictError), then the head row, then the insert. A request that
// fails is rolled back to its savepoint and answered with its own error;
// the others still commit. The requests of a group run boundary by
// boundary, each boundary's in their order of arrival, in one transaction
// (so a boundary's appends without a condition form one run however the
// callers of several boundaries interleave): each one sees the events of its
// boundary's requests before it, so a retry of an append earlier in the same
// group is recognised, and a condition is checked against everything that
// will commit before it. If the COMMIT fails,
// every request of the group gets that error (nothing of the group was
// written).
//
// Positions come from the boundary's head row: UPDATE boundaries SET head =
// head + n ... RETURNING head gives the request positions head-n+1 … head.
// The row update and the insert are in the same transaction, and there is
// one writer, so positions are dense and in commit order (I1) without any
// visibility barrier: a reader's snapshot holds either all of a commit or
// none of it. One time is taken per group: every event of a commit has the
// same commit time.
//
// After the COMMIT the writer answers each request and calls the OnAppend
// callbacks once per boundary that got events, so a callback always finds
// its events readable. A caller whose context ends while its request still
// waits gets ctx.Err() and nothing of it is written; once the writer has
// begun the request, the caller waits for the true outcome. Close stops the
// writer after the group in flight; requests not yet begun get ErrClosed.
//
// A group of one request runs without a savepoint (its failure rolls back
// the whole transaction, which holds nothing else), and the statements of
// the write path are prepared once at Open: at single-event appends,
// parsing SQL was about a quarter of the writer's time.
//
// # Choices where the seam is silent
//
//   - An idempotent retry is judged before the condition: a retry of an
//     append that passed its condition returns the stored positions even if
//     a matching event was appended since. A retry must resend the same
//     events in the same order; a reordered, partial-and-new or
//     different-content retry is ErrConflict naming the id and its stored
//     position.
//   - Read with limit < 1 is ErrInvalid.
//   - AcquireLease of an unknown boundary is ErrNotFound.
//   - A lease released (ReleaseLease) is expired, not deleted: the next
//     acquisition, even by the same holder, starts the next term.
//
// # Everything else
//
// Reads use a small pool of query_only connections; a read takes the
// boundary's epoch and the events in one read transaction. Checkpoints and
// lease acquisitions write through the same single write connection,
// queueing behind a group transaction; a lease this store acquired is
// renewed in memory only (see RenewLease: one process owns the directory,
// and the term, which fences the checkpoint, is written at every
// acquisition). The checkpoint UPDATE carries its own fence (max, not
// beyond the head, only for the current lease term), and lease times are the
// process clock in unix milliseconds, which is the store's clock since one
// process owns the directory (docs/design.md §9).
//
// SQLite errors are translated where they occur: busy, I/O, full and similar
// become event.ErrUnavailable, constraint violations event.ErrConflict,
// except an insert that runs into a row stored beyond the head, which is
// event.ErrCorrupt naming that row; the driver's error survives only as
// text. Reads check what they return against the head of their snapshot
// and the JSON of data and metadata (the columns are text): a row changed
// behind orisun's back is event.ErrCorrupt, never served (docs/design.md
// §5, "Bad rows").
package sqlite
