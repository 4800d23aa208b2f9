package postgres

import (
	"strconv"
	"strings"

	"github.com/orisun-io/orisun/event"
)

// The SQL of the PostgreSQL backend. Every value is a bind parameter:
// boundary names, ids, types and tags never become part of a statement's
// text. The few statements built at run time (a condition's or a read's
// query filter) only add placeholders, and their shape depends only on how
// many query items there are and which of them have types and tags, so
// pgx's per-connection statement cache keeps a handful of them prepared.

const (
	// Migrations. The advisory lock is taken at the start of every
	// migration transaction and released by its end, so two nodes starting
	// at once apply each version exactly once: the second waits, then
	// finds the version row.
	sqlMigrationLock         = `SELECT pg_advisory_xact_lock($1)`
	sqlCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS orisun_schema_migrations (
    version    bigint      NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	sqlMaxMigration       = `SELECT coalesce(max(version), 0) FROM orisun_schema_migrations`
	sqlMigrationApplied   = `SELECT EXISTS (SELECT 1 FROM orisun_schema_migrations WHERE version = $1)`
	sqlInsertMigrationRow = `INSERT INTO orisun_schema_migrations (version, name) VALUES ($1, $2)`

	// Boundaries. The insert and the select are two statements on purpose:
	// a concurrent CreateBoundary of the same name makes ON CONFLICT wait
	// for the other insert, and a select in the same statement would still
	// use the snapshot from before that wait and see no row.
	sqlInsertBoundary = `INSERT INTO orisun_boundaries (name, epoch) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING name, epoch::text, head`
	sqlSelectBoundary   = `SELECT name, epoch::text, head FROM orisun_boundaries WHERE name = $1`
	sqlSelectBoundaries = `SELECT name, epoch::text, head FROM orisun_boundaries ORDER BY name`

	// The group transaction. READ COMMITTED is what the write path is
	// reasoned in (see the package documentation), so it is explicit
	// rather than left to the database's default.
	sqlBegin    = `BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE`
	sqlCommit   = `COMMIT`
	sqlRollback = `ROLLBACK`
	sqlNotify   = `SELECT pg_notify($1, $2)`
	// The plan_cache_mode of a group transaction's statements (the pool's
	// is auto, see Open, unless the URL sets another), set before the
	// statements that need it. The unconditioned append statement takes a
	// cached generic plan: nothing in it depends on the values, and
	// planning it took about 0.2 ms (pg_stat_statements), against 0.52 ms
	// to run it for 64 events. A conditional one whose position is near
	// the head also does, in a shape with one sensible plan
	// (sqlAppendConditionNear); any other is planned with its values, as
	// the reads with a query are. The generic plan of the one shape there
	// was, costed without the values, was a bitmap scan of every event with the
	// condition's tag, a sequential scan of the boundary or the range scan
	// after the position, depending on the statistics when the connection
	// first planned it (64 callers with conditions: 10,000 events/s in one
	// run, 1,000 in the next; a lone caller's condition took 1.4 ms where
	// the planned one takes 0.05 ms and 0.06–0.09 to plan).
	sqlGenericPlans = `SET LOCAL plan_cache_mode = auto`
	sqlCustomPlans  = `SET LOCAL plan_cache_mode = force_custom_plan`

	// sqlLockHead takes the boundary's head row for the group transaction
	// (the lock an UPDATE of the row takes) and reads it. Every statement
	// after it starts after the lock was granted, so its READ COMMITTED
	// snapshot holds every event committed by the previous holder: this is
	// what makes a condition authoritative (docs/design.md §4).
	//
	// It is an UPDATE that changes nothing rather than SELECT … FOR NO KEY
	// UPDATE (the same lock): the request's own UPDATE of the row runs in a
	// savepoint, and after a lock taken by the transaction itself the row's
	// xmax would become a multixact, which Heads cannot match against the
	// running transactions; after an UPDATE by the transaction it stays the
	// transaction's own id, so Heads reports the row held (a publisher that
	// idles then probes it and the status says "waiting"). The extra row
	// version can be a heap-only (HOT) update, head not being indexed; that
	// was not measured.
	sqlLockHead = `UPDATE orisun_boundaries SET head = head WHERE name = $1 RETURNING head, epoch::text`

	// sqlAppend* build the statement that appends one request: it draws
	// the positions from the head row and inserts the events, unless the
	// request's condition matches an event (then it changes nothing and
	// returns no row). $1 boundary, $2 the number of events, $3…$7 the
	// events as parallel arrays: ids, types, each event's tags as an array
	// literal ('{"a","b"}', see arrayLiteral), data, and metadata or NULL.
	// $8 is the condition's position and $9… its query. One text for every
	// batch size: the events are arrays, not rows of placeholders. (The
	// tags were a JSON array per event, taken apart by a subquery for each
	// row: about 5% of the statement's time on the server. Slicing one flat
	// array of all the tags instead was as fast for small appends, but a
	// slice of a text array walks it from its start: 4,000 events of 5
	// tags took 0.22 s.)
	sqlAppendHead = `WITH h AS (
    UPDATE orisun_boundaries SET head = head + $2
    WHERE name = $1`
	sqlAppendCondition = `
      AND NOT EXISTS (SELECT 1 FROM orisun_events ev WHERE ev.boundary = $1 AND ev.position > $8`
	// sqlAppendConditionNear is the condition of a position near the head
	// (groupRun.near), in a shape whose generic plan cannot be anything but
	// a walk of the primary key from the position on: the events after it
	// in position order (a sequential scan would have to sort them),
	// fenced by OFFSET 0 so that the query's clauses stay outside and
	// cannot make an index on tags or type look cheaper.
	sqlAppendConditionNear = `
      AND NOT EXISTS (SELECT 1 FROM (
          SELECT ev.type, ev.tags FROM orisun_events ev WHERE ev.boundary = $1 AND ev.position > $8
          ORDER BY ev.position OFFSET 0) ev WHERE true`
	sqlAppendConditionEnd = `)`
	sqlAppendTail         = `
    RETURNING head, epoch
), ins AS (
    INSERT INTO orisun_events (boundary, position, id, type, time, tags, data, metadata)
    SELECT $1, h.head - $2 + u.ord, u.id, u.type, statement_timestamp(),
           u.tags::text[], u.data::json, u.metadata::json
    FROM h, unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
            WITH ORDINALITY AS u(id, type, tags, data, metadata, ord)
)
SELECT head, epoch::text FROM h`

	// sqlFindIDs returns the stored events among a request's ids, up to the
	// head the request saw (events of later requests of the same group are
	// not its business).
	sqlFindIDs = `SELECT position, id::text, type, tags, data, metadata FROM orisun_events
WHERE boundary = $1 AND id = ANY($2::uuid[]) AND position <= $3`
	// sqlFirstMatch* find the first event after the condition's position,
	// up to the head the request saw, that matches its query.
	sqlFirstMatchPrefix = `SELECT ev.position FROM orisun_events ev
WHERE ev.boundary = $1 AND ev.position > $2 AND ev.position <= $3`
	sqlFirstMatchSuffix = `
ORDER BY ev.position LIMIT 1`
	sqlBeyondHead = `
  AND ev.position > (SELECT b.head FROM orisun_boundaries b WHERE b.name = $1)`

	// sqlRead* read a page of events with the boundary's epoch and head in
	// one statement, so all come from one snapshot: the events (epoch and
	// head NULL), then one row for the boundary (its epoch and head, NULL
	// events), which is
	// there even when no event is after the position and is missing only
	// when the boundary is. The events come straight from the primary key
	// in position order: a join of the boundary row to the events, as
	// before, made PostgreSQL sort the page again after the join (a third
	// of a 1,000-event read of 1 KB events). $1 boundary, $2 after, $3
	// limit, $4… the query.
	sqlReadPrefix = `(SELECT NULL::text, ev.position, ev.id, ev.type, ev.time, ev.tags, ev.data, ev.metadata, NULL::bigint
    FROM orisun_events ev
    WHERE ev.boundary = $1 AND ev.position > $2`
	sqlReadSuffix = `
    ORDER BY ev.position
    LIMIT $3)
UNION ALL
SELECT epoch::text, NULL::bigint, NULL::uuid, NULL::text, NULL::timestamptz, NULL::text[], NULL::json, NULL::json, head
FROM orisun_boundaries WHERE name = $1`

	// sqlLatest* read the epoch, the head and the last event matching a
	// query up to that head in one statement, so all three come from one
	// snapshot. $1 boundary, $2… the query.
	sqlLatestPrefix = `SELECT b.epoch::text, b.head, e.position, e.id::text, e.type, e.time, e.tags, e.data, e.metadata
FROM orisun_boundaries b
LEFT JOIN LATERAL (
    SELECT ev.position, ev.id, ev.type, ev.time, ev.tags, ev.data, ev.metadata
    FROM orisun_events ev
    WHERE ev.boundary = b.name AND ev.position <= b.head`
	sqlLatestSuffix = `
    ORDER BY ev.position DESC
    LIMIT 1
) e ON true
WHERE b.name = $1`

	// Checkpoints. The checkpoint lives on the lease row, not the head row:
	// an append transaction held open holds the head row, and the
	// checkpoint write must not wait for it. It only moves forward
	// (greatest), never past the head (read from this statement's snapshot:
	// the head only grows, so the test is never too lax), and only for the
	// holder of the current term (I3, I6): the update locks the lease row,
	// and a takeover that committed meanwhile is re-checked against the new
	// row version (READ COMMITTED), so a stale term changes nothing.
	sqlSelectCheckpoint = `SELECT coalesce((SELECT checkpoint FROM orisun_leases WHERE boundary = $1), 0)
FROM orisun_boundaries WHERE name = $1`
	sqlSaveCheckpoint = `UPDATE orisun_leases SET checkpoint = greatest(checkpoint, $1)
WHERE boundary = $2 AND holder = $3 AND term = $4
  AND $1 <= (SELECT head FROM orisun_boundaries WHERE name = $2)
RETURNING checkpoint`
	// sqlProbeHead conflicts with the head row's FOR NO KEY UPDATE lock of
	// an append transaction and never waits for it.
	sqlProbeHead = `SELECT 1 FROM orisun_boundaries WHERE name = $1 FOR SHARE NOWAIT`
	// sqlHeadXmax names the head row's holder once sqlProbeHead found it
	// held (HeadHolder).
	sqlHeadXmax = `SELECT xmax::text FROM orisun_boundaries WHERE name = $1`
	// sqlCheckpointRefusal says why a save changed nothing.
	sqlCheckpointRefusal = `SELECT b.head, l.holder, l.term
FROM orisun_boundaries b LEFT JOIN orisun_leases l ON l.boundary = b.name
WHERE b.name = $1`

	// Leases, in the database's clock (clock_timestamp(): the time the
	// expression is evaluated, also after a lock wait). $3 is the time to
	// live in microseconds.
	//
	// sqlAcquireLease inserts term 1 for a boundary without a lease row, or
	// updates the row when the holder already has it (an unexpired lease
	// keeps its term; an expired one begins the next), when it has
	// expired, or when its holder is one of $4, holders known to have
	// ended (the next term for the new holder). Another holder's unexpired
	// lease makes it return no row. A missing boundary also gives no row
	// (nothing to insert from).
	//
	// It also returns the row as it was before (cur: the statement's
	// snapshot, "live" judged now), for the log of a lease taken from an
	// ended holder: it is the row this statement replaced when its term is
	// the new term less one (a row changed by another transaction after
	// the snapshot has a newer term).
	sqlAcquireLease = `WITH cur AS (
    SELECT holder, term, expires_at, expires_at > clock_timestamp() AS live FROM orisun_leases WHERE boundary = $1
)
INSERT INTO orisun_leases AS l (boundary, holder, term, expires_at)
SELECT b.name, $2, 1, clock_timestamp() + $3::bigint * interval '1 microsecond'
FROM orisun_boundaries b WHERE b.name = $1
ON CONFLICT (boundary) DO UPDATE
SET holder = excluded.holder,
    term = CASE WHEN l.holder = excluded.holder AND l.expires_at > clock_timestamp() THEN l.term ELSE l.term + 1 END,
    expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at <= clock_timestamp() OR l.holder = ANY($4::text[])
RETURNING l.term, l.expires_at,
    (SELECT holder FROM cur), (SELECT term FROM cur), (SELECT expires_at FROM cur), coalesce((SELECT live FROM cur), false)`
	// sqlLeaseState is what AcquireLease reports when it took nothing: does
	// the boundary exist, and who holds its lease until when.
	sqlLeaseState = `SELECT l.holder, l.term, l.expires_at, coalesce(l.expires_at > clock_timestamp(), false)
FROM orisun_boundaries b LEFT JOIN orisun_leases l ON l.boundary = b.name
WHERE b.name = $1`
	sqlRenewLease = `UPDATE orisun_leases SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE boundary = $1 AND holder = $2 AND term = $3 AND expires_at > clock_timestamp()
RETURNING expires_at`
	// A released lease expires at the Unix epoch: expired, not deleted, so
	// the next acquisition begins the next term. The release is announced
	// on leaseChannel (delivered at its commit), so that standbys on other
	// nodes take the lease at once instead of at their next retry.
	sqlReleaseLease = `WITH r AS (
    UPDATE orisun_leases SET expires_at = to_timestamp(0)
    WHERE boundary = $1 AND holder = $2 AND term = $3 AND expires_at > to_timestamp(0)
    RETURNING boundary
)
SELECT count(*) FROM (SELECT pg_notify('` + leaseChannel + `', boundary) FROM r) n`
	sqlSelectLease = `SELECT holder, term, expires_at FROM orisun_leases WHERE boundary = $1`

	// Nodes (placement). sqlHeartbeat writes this node's heartbeat and
	// counts the nodes whose heartbeat is fresher than the TTL ($3, in
	// microseconds), in one statement: the count sees the table as it was
	// before the upsert, so this node is added to the others. It also names
	// another process with this node id ($2) that has beaten within the TTL
	// and after this process's row was created: a live twin (a copied
	// data directory), not the row of this node's previous, dead process.
	// And it names those of the holders $4 (the earlier processes of this
	// node's data directory, by its lock file) that have beaten after this
	// process's row was created, hence after it took the lock: alive, so
	// not earlier processes at all (a cloned volume), whatever the file
	// says.
	sqlHeartbeat = `WITH beat AS (
    INSERT INTO orisun_nodes (holder, node_id, heartbeat_at) VALUES ($1, $2, clock_timestamp())
    ON CONFLICT (holder) DO UPDATE SET heartbeat_at = excluded.heartbeat_at
    RETURNING started_at
)
SELECT (SELECT count(*) + 1 FROM orisun_nodes
        WHERE holder <> $1 AND heartbeat_at > clock_timestamp() - $3::bigint * interval '1 microsecond'),
       (SELECT coalesce(min(o.holder), '') FROM orisun_nodes o, beat
        WHERE o.node_id = $2 AND o.holder <> $1 AND o.heartbeat_at > beat.started_at
          AND o.heartbeat_at > clock_timestamp() - $3::bigint * interval '1 microsecond'),
       (SELECT coalesce(array_agg(o.holder ORDER BY o.holder), '{}') FROM orisun_nodes o, beat
        WHERE o.holder = ANY($4::text[]) AND o.holder <> $1 AND o.heartbeat_at > beat.started_at)`
	// sqlPruneNodes deletes rows of nodes silent for far longer than a
	// TTL (nodes that died). SKIP LOCKED: two nodes pruning at once never
	// wait for, nor deadlock on, each other.
	sqlPruneNodes = `DELETE FROM orisun_nodes WHERE holder IN (
    SELECT holder FROM orisun_nodes WHERE heartbeat_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
    ORDER BY holder FOR UPDATE SKIP LOCKED)`
	sqlRemoveNode = `DELETE FROM orisun_nodes WHERE holder = $1`
)

// Savepoint statements of the group transaction.
const (
	savepoint    = "orisun_append"
	sqlSavepoint = "SAVEPOINT " + savepoint
	sqlRelease   = "RELEASE SAVEPOINT " + savepoint
	// Sent without arguments, so pgx uses the simple protocol and runs
	// both statements in one round trip.
	sqlRollbackToRelease = "ROLLBACK TO SAVEPOINT " + savepoint + "; RELEASE SAVEPOINT " + savepoint
	notifyChannel        = "orisun_events"
	leaseChannel         = "orisun_leases" // payload: a boundary whose lease was released
	sqlServerStarted     = "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint"
	sqlListen            = "LISTEN " + notifyChannel + "; LISTEN " + leaseChannel + "; LISTEN " + stagedChannel
	uniqueIDKey          = "orisun_events_boundary_id_key"
	eventsPKey           = "orisun_events_pkey"
	// sqlFirstBeyond finds the stored row beyond the head $2 that an
	// append's insert ran into.
	sqlFirstBeyond = `SELECT position FROM orisun_events WHERE boundary = $1 AND position > $2 ORDER BY position LIMIT 1`
	migrationsLock = int64(0x6f72697375_6e01) // "orisun" 0x01: the migrations' advisory lock key
)

// appendSQL returns the append statement of a request with cond (nil: none;
// near: its position is near the head, see sqlAppendConditionNear) and the
// bind values of its query, which follow $8.
func appendSQL(cond *event.Condition, near bool) (string, []any) {
	if cond == nil {
		return sqlAppendHead + sqlAppendTail, nil
	}
	filter, args := whereQuery(&cond.Query, "ev", 9)
	if near {
		return sqlAppendHead + sqlAppendConditionNear + filter + sqlAppendConditionEnd + sqlAppendTail, args
	}
	return sqlAppendHead + sqlAppendCondition + filter + sqlAppendConditionEnd + sqlAppendTail, args
}

// firstMatchSQL returns the statement finding a condition's first match and
// the bind values of its query, which follow $3.
func firstMatchSQL(cond *event.Condition) (string, []any) {
	filter, args := whereQuery(&cond.Query, "ev", 4)
	return sqlFirstMatchPrefix + filter + sqlFirstMatchSuffix, args
}

// beyondMatchSQL returns the statement finding the first row beyond the
// boundary's head, as the statement sees it, that matches a condition
// (rows orisun did not write: the head never passes one, since an append
// that reaches it fails), with firstMatchSQL's parameters.
func beyondMatchSQL(cond *event.Condition) (string, []any) {
	filter, args := whereQuery(&cond.Query, "ev", 4)
	return sqlFirstMatchPrefix + sqlBeyondHead + filter + sqlFirstMatchSuffix, args
}

// readSQL returns the read statement for q and its query's bind values,
// which follow $3.
func readSQL(q *event.Query) (string, []any) {
	filter, args := whereQuery(q, "ev", 4)
	return sqlReadPrefix + filter + sqlReadSuffix, args
}

// latestSQL returns the read-latest statement for q and its query's bind
// values, which follow $1.
func latestSQL(q *event.Query) (string, []any) {
	filter, args := whereQuery(q, "ev", 2)
	return sqlLatestPrefix + filter + sqlLatestSuffix, args
}

// whereQuery turns a query into " AND (item OR item …)" over the events of
// alias, with placeholders from $first on, and its bind values; an empty
// query is no filter at all. An item is "type = ANY($n::text[])" (any of its
// types) and "tags @> $m::text[]" (all of its tags, answered by the GIN
// index); an item with neither matches every event. Tags are compared as
// whole values: no pattern, no quoting, no splitting.
func whereQuery(q *event.Query, alias string, first int) (string, []any) {
	if q == nil || len(q.Items) == 0 {
		return "", nil
	}
	var sb strings.Builder
	var args []any
	n := first
	param := func(v any, cast string) string {
		args = append(args, v)
		p := "$" + strconv.Itoa(n) + cast
		n++
		return p
	}
	sb.WriteString("\n      AND (")
	for i, it := range q.Items {
		if i > 0 {
			sb.WriteString(" OR ")
		}
		sb.WriteString("(")
		parts := 0
		if len(it.Types) > 0 {
			sb.WriteString(alias + ".type = ANY(" + param(it.Types, "::text[]") + ")")
			parts++
		}
		if len(it.Tags) > 0 {
			if parts > 0 {
				sb.WriteString(" AND ")
			}
			sb.WriteString(alias + ".tags @> " + param(it.Tags, "::text[]"))
			parts++
		}
		if parts == 0 {
			sb.WriteString("true")
		}
		sb.WriteString(")")
	}
	sb.WriteString(")")
	return sb.String(), args
}
