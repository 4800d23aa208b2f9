// Package postgres is the PostgreSQL backend of orisun. It implements
// backend.Store with pgx (a pgxpool for the work, one extra connection for
// LISTEN). Any number of stores, in one process or on many nodes, may share a
// database: everything that must be serialised is serialised by the
// database, never by this process.
// The node opens it from its configuration (ORISUN_BACKEND=postgres). It is
// orisun's machinery, not for import by applications: its API may change
// without notice, and such a change is not a breaking change of orisun.
//
// # The head row
//
// Each boundary has one row in orisun_boundaries whose head column is the
// last committed position. An append transaction takes that row (an UPDATE
// that changes nothing, so the row's lock is the transaction's own and
// Heads can see it held) and draws its positions from it
// with UPDATE … SET head = head + n … RETURNING head, so the appenders of one
// boundary are serialised from the draw to the commit. PostgreSQL releases a
// transaction's row locks only after its commit is visible, so the next
// appender draws p+1 only once p is visible to every new snapshot: positions
// are dense and in commit order (I1), with no visibility barrier, and a
// reader's snapshot always holds a prefix 1..k of the boundary. Appenders of
// different boundaries take different rows and never wait on each other.
//
// # The write path
//
// Append puts its request in its boundary's queue and waits. A small pool of
// workers (half of MaxConns, at least one) runs group transactions: a worker
// takes a ready boundary, drains every request waiting for it right now (up
// to GroupMaxEvents events; never sleeping to wait for more, so a lone append
// commits at once) and commits them in one transaction, so one WAL flush
// serves many appends. A boundary is opened by one worker at a time, from
// draining its queue until the group holds its head row. Then the next group
// of the boundary may begin on another worker and connection while the
// first commits: its statements wait in the database for the head row and
// take it as soon as the first group's COMMIT is done, instead of being sent
// only after the first group's answers came back (a round trip, waking the
// callers, gathering them again). One group of a boundary holds the head
// row and at most one more waits for it, and they commit in the order they
// began, which keeps the
// boundary's requests in order of arrival. When a group is done and more
// requests wait, the boundary goes to the back of the line, so a busy
// boundary cannot starve the others.
//
// A group holds the requests of one boundary only. A group spanning
// boundaries would commit more appends per flush when many boundaries are
// busy, but it would make boundaries wait on each other: a group that needs
// the head row of a boundary another node holds would hold up the appends of
// every other boundary in it (and groups of two nodes taking rows in
// different orders would deadlock). Across boundaries, throughput comes from
// groups running side by side; PostgreSQL flushes concurrent commits
// together. A boundary whose head row is held elsewhere ties up one worker;
// other boundaries wait only when every worker is so tied up.
//
// Inside the group transaction (READ COMMITTED, explicitly) each request runs
// in its own SAVEPOINT (a run of consecutive requests without conditions in
// one), and the statements are pipelined: the first batch is BEGIN, the
// head-row lock, every request's SAVEPOINT, append statement and RELEASE,
// and, when the batch holds an append without a condition, the notification
// and the COMMIT. A group whose requests all write costs that one round
// trip. A statement that fails makes the database skip the rest of the
// batch, the COMMIT with it; a batch whose requests all have conditions
// commits separately, and only if one of them wrote. The append statement
// does the draw and the insert at once: UPDATE the head row (unless the
// request's condition matches an event) and INSERT the events from arrays
// (unnest), at positions head-n+1 … head. One statement text serves every
// batch size and keeps the events' JSON as sent.
//
// The lock is a statement of its own because of READ COMMITTED: a statement
// that waits for a row lock re-reads that row afterwards, but keeps the
// snapshot it started with for everything else, so a condition checked by
// the statement that waited would not see the events of the transaction it
// waited for. Every statement after the lock starts after it was granted,
// so the condition check is authoritative at commit (docs/design.md §4).
//
// A request whose statement fails (a stored id: PostgreSQL's unique
// violation on (boundary, id); a value the database refuses) aborts its
// savepoint; the database skips the rest of the batch. The worker rolls that
// request back to its savepoint, looks up its stored ids to tell an
// idempotent retry (same content, same order: the stored positions) from a
// conflict, and sends the skipped requests again. A request whose condition
// matched wrote nothing and gets the same lookups plus the condition's first
// match, for its *event.ConflictError. The lookups are bounded by the head
// the request saw, so each request is judged exactly as if it had run alone
// at its turn, even when later requests of the group already wrote: a retry
// of an append earlier in the same group is recognised, and a condition sees
// everything that commits before it. If the COMMIT fails, no request of the
// group is answered with success (a retry of an earlier request of the group
// included). Lookups that run after the COMMIT (a condition that matched in
// a batch that committed) and fail take only the undecided requests: the
// committed ones keep their answers.
//
// The head-row lock of a boundary that does not exist finds no row; the
// batch still runs, and each append statement's own result decides: one
// that found the boundary (created meanwhile) wrote and is committed, one
// that did not is answered ErrNotFound.
//
// After the COMMIT the worker answers each request and calls the OnAppend
// callbacks for the boundary, so a callback always finds its events readable.
// A caller whose context ends while its request still waits in the queue gets
// ctx.Err() and nothing of it is written; once a group has taken the request,
// the caller waits for the true outcome. When the connection breaks while the
// COMMIT is under way the outcome is unknown: the error is ErrUnavailable, and
// the same append sent again (same ids) returns the stored positions if the
// commit happened (docs/design.md §3, §11). Close stops the workers after the groups
// in flight; requests not yet taken get ErrClosed. A group that cannot finish
// within a minute (a stuck transaction elsewhere holds the head row, the
// server stopped answering) fails with ErrUnavailable rather than hold its
// boundary and Close for ever.
//
// # Notifications
//
// The group transaction ends with SELECT pg_notify('orisun_events',
// boundary), pipelined with the COMMIT (and with the appends, see above). PostgreSQL delivers a notification
// only when its transaction commits, so a notified boundary has its events
// readable. Each store keeps one connection of its own (not from the pool:
// LISTEN belongs to a session) listening on the channel, and calls the
// OnAppend callbacks with the boundary of every notification, so a commit on
// any node wakes the publishers of every node. The store also calls its
// callbacks itself right after its own commits, without waiting for the
// round trip, and so the listener passes over the notifications sent by
// its own pool's connections: it keeps the server process id of each
// (added on connect, removed before the pool closes it) and compares the
// notification's. Announced twice, a commit woke the publisher a second
// time, for a read that found nothing (docs/performance.md). A group
// whose COMMIT went out but whose outcome the store does not know (an
// error on its side after the server ran it) calls the callbacks anyway,
// and so does a move of staged events. Each process id is kept with the
// server's start time (pg_postmaster_start_time, read by each connection
// and by the listener), so the ids of connections to an earlier run of
// the server, dead and not yet closed by the pool, never match that of a
// connection to the new run. Within one run, a connection the server
// ended stays in the pool until the pool next uses it or retires it (up
// to half an hour idle, or its lifetime of an hour, by default), and were its id
// reused by another node's connection meanwhile, that node's
// notifications would be passed over: the node's read of every head each
// poll interval catches what they would have woken.
// Behind PgBouncer the ids the pool knows are PgBouncer's, not the
// server's, and nothing is passed over (each commit then wakes twice, as
// before). When the LISTEN connection breaks, the listener reconnects with
// exponential back-off (ListenReconnectMin … ListenReconnectMax), logs once
// per change of state, and after a reconnect wakes every boundary once,
// since notifications sent while it was away are lost. Correctness never
// depends on a notification: the publisher also polls.
//
// A released lease is announced the same way, on the channel orisun_leases
// (ReleaseLease's statement notifies for the row it expired, so a release
// of a lease not held announces nothing); the same connection listens to it
// and calls the OnLeaseReleased callbacks, so a standby on any node takes
// the lease at once instead of at its next retry.
//
// # Checkpoints and leases, in the database's time
//
// The checkpoint is a column of the lease row, not of the head row: an
// append transaction held open (a slow appender) holds the head row, and the
// publisher's checkpoint must not wait behind it. It is written by one
// conditional UPDATE of the lease row: greatest(checkpoint, p), only where
// p <= head and only where the row names the caller's holder and term; the
// UPDATE locks the row, so a takeover committed meanwhile is re-checked
// against the new row version and a stale term changes nothing. When it
// changes nothing a second statement says why: the boundary is
// missing (ErrNotFound), p is beyond the head (ErrInvalid) or the term is not
// current (ErrLeaseLost), as in the SQLite backend.
//
// The lease of a boundary is a row in orisun_leases: holder, term, expiry.
// Every time is the database's clock (clock_timestamp()), never this
// process's, so nodes with skewed clocks agree on who holds a lease.
// Acquisition is one INSERT … ON CONFLICT DO UPDATE … WHERE: term 1 for a
// boundary without a lease; the same term, extended, for the holder of an
// unexpired lease; the next term for anyone when it has expired (even its
// last holder: every expiry ends a term). Another holder's unexpired lease
// makes it change nothing, and a second statement returns that lease with
// ErrLeaseHeld. Renewal is an UPDATE that requires holder, term and an
// unexpired lease; a release sets the expiry to the Unix epoch (expired, not
// deleted, so the next acquisition begins the next term). Session advisory
// locks are not used as leases: a pooler or a half-open connection would
// break them (docs/design.md §9).
//
// Beyond the seam, the store keeps the nodes of a cluster for placement
// (nodes.go): each node's row in orisun_nodes carries a heartbeat in the
// database's clock, written every third of a lease TTL; Heartbeat counts
// the rows younger than the TTL in the same statement, so a node that lost
// its database stops being counted within a TTL.
//
// # Choices where the seam is silent
//
//   - data and metadata are stored as json, not jsonb: json keeps the exact
//     bytes (key order, duplicate keys, number spelling), which the
//     idempotent-retry comparison and the stream body rely on.
//   - An event's time is statement_timestamp() of its request's append
//     statement, which runs after the head row was granted: every event of a
//     request has the same time, and times never go backwards along the
//     positions of a boundary (on the database's clock). The SQLite backend
//     takes one time per group; both are "the commit time" to a microsecond.
//   - An idempotent retry is judged before the condition: a retry of an
//     append that passed its condition returns the stored positions even if
//     a matching event was appended since. A retry must resend the same
//     events in the same order; anything else is ErrConflict naming the id.
//   - Read with limit < 1 is ErrInvalid. AcquireLease of an unknown boundary
//     is ErrNotFound.
//   - The store's connections name themselves in pg_stat_activity:
//     application_name "orisun" (or the URL's), and the same with
//     "-listener" for the LISTEN connection.
//   - Everything besides the group transaction is a single statement in the
//     session's default isolation, which must be READ COMMITTED (PostgreSQL's
//     default). Under a stricter default those statements stay correct but
//     may fail with serialisation errors (ErrUnavailable) under contention.
//
// # Migrations
//
// The files of migrations.Postgres are applied at Open, each version in its
// own transaction together with its row in orisun_schema_migrations. Each
// of those transactions first takes a transaction-scoped advisory lock
// (pg_advisory_xact_lock) and only then reads the versions, so nodes that
// start at once apply each version exactly once, and a node that crashes
// mid-migration leaves no lock behind. A database whose schema is newer
// than this orisun knows is refused.
//
// # Errors
//
// Errors are translated where they occur (translate, the shape of river's
// riverpgxv5 interpretError): serialisation failures, deadlocks, lock and
// statement timeouts, connection errors, admin shutdown (pg_terminate_backend),
// resource and I/O errors become event.ErrUnavailable; integrity violations
// event.ErrConflict, except an insert that runs into a row stored beyond the
// head (the primary key), or a condition that matches only such a row,
// which are event.ErrCorrupt naming the row, as is a read that finds a
// position missing or beyond the head of its snapshot (docs/design.md §5,
// "Bad rows"); data exceptions (a value the database refuses, such as
// invalid UTF-8 in a JSON text) event.ErrInvalid; program limits
// event.ErrTooLarge; anything else is an internal error. The driver's error
// survives only as text: no pgx type crosses the seam.
package postgres
