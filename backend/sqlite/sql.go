package sqlite

// The SQL of the SQLite backend. Every value is a bind parameter: boundary
// names, ids, types and tags never become part of a statement's text. The
// few statements built at run time (id lookups, multi-row inserts, queries)
// only repeat placeholders.

const (
	sqlCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    applied_at INTEGER
)`
	sqlMigrationApplied   = `SELECT count(*) FROM schema_migrations WHERE version = ?`
	sqlMaxMigration       = `SELECT coalesce(max(version), 0) FROM schema_migrations`
	sqlInsertMigrationRow = `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`

	// Boundaries.
	sqlInsertBoundary = `INSERT INTO boundaries (name, epoch, head, checkpoint, created_at)
VALUES (?, ?, 0, 0, ?)
ON CONFLICT (name) DO NOTHING`
	sqlSelectBoundary   = `SELECT name, epoch, head FROM boundaries WHERE name = ?`
	sqlSelectBoundaries = `SELECT name, epoch, head FROM boundaries ORDER BY name`
	sqlSelectEpoch      = `SELECT epoch FROM boundaries WHERE name = ?`

	// Append. Taking the head row is what serialises appenders of one
	// boundary and makes positions dense and commit-ordered (docs/design.md §2).
	sqlTakeHead = `UPDATE boundaries SET head = head + ? WHERE name = ? RETURNING head, epoch`
	// sqlFindIDsPrefix is completed with "?, ?, …)" for one chunk of ids.
	// INDEXED BY pins the (boundary, id) index for this lookup, so the
	// planner can never choose a scan of the boundary's primary-key range
	// (every event of the boundary) for it instead.
	sqlFindIDsPrefix = `SELECT position, id, type, tags, data, metadata FROM events INDEXED BY events_boundary_id
WHERE boundary = ? AND id IN (`
	// sqlInsertEventsPrefix is completed with one "(?, ?, ?, ?, ?, ?, ?, ?)"
	// per event.
	sqlInsertEventsPrefix = `INSERT INTO events (boundary, position, id, type, time, tags, data, metadata) VALUES `
	sqlInsertEventsRow    = `(?, ?, ?, ?, ?, ?, ?, ?)`
	// Queries: a read page, a read-latest and a condition check. ?1 is the
	// boundary, ?2 the position bound (after it for read and condition, up to
	// it for latest), ?3 the number of positions wanted (the page size, or 1);
	// a query's types and tags are ?4 on (see matchSQL). The plain forms are
	// for the empty query, which matches every event.
	sqlFirstAny = `SELECT position FROM events WHERE boundary = ?1 AND position > ?2 ORDER BY position LIMIT ?3`
	// sqlFirstFrom finds the stored row an append's insert ran into.
	sqlFirstFrom = `SELECT position FROM events WHERE boundary = ? AND position >= ? ORDER BY position LIMIT 1`
	sqlReadAll   = `SELECT position, id, type, time, tags, data, metadata FROM events
WHERE boundary = ?1 AND position > ?2 ORDER BY position LIMIT ?3`
	sqlLatestAny = `SELECT position, id, type, time, tags, data, metadata FROM events
WHERE boundary = ?1 AND position <= ?2 ORDER BY position DESC LIMIT ?3`
	// The filtered forms wrap matchSQL's positions: the first ?3 of them in
	// the statement's order, then their events by primary key. CROSS JOIN
	// keeps that join order (SQLite never reorders a CROSS JOIN).
	sqlFirstMatchPrefix = `SELECT p FROM (`
	sqlFirstMatchSuffix = `) ORDER BY p LIMIT ?3`
	sqlReadMatchPrefix  = `SELECT e.position, e.id, e.type, e.time, e.tags, e.data, e.metadata
FROM (SELECT p FROM (`
	sqlReadMatchSuffix = `) ORDER BY p LIMIT ?3) m CROSS JOIN events e ON e.boundary = ?1 AND e.position = m.p
ORDER BY e.position`
	sqlLatestMatchSuffix = `) ORDER BY p DESC LIMIT ?3) m CROSS JOIN events e ON e.boundary = ?1 AND e.position = m.p
ORDER BY e.position DESC`

	// The number of a tag's positions on the statement's side of the bound,
	// counted up to tagProbeCap: an item with several tags is driven by the
	// rarest (see rarestTagFirst).
	sqlTagProbeAfter = `SELECT count(*) FROM (SELECT 1 FROM event_tags WHERE boundary = ?1 AND tag = ?2 AND position > ?3 LIMIT ?4)`
	sqlTagProbeUpTo  = `SELECT count(*) FROM (SELECT 1 FROM event_tags WHERE boundary = ?1 AND tag = ?2 AND position <= ?3 LIMIT ?4)`

	// Read-latest reads the head and epoch first, in the same read
	// transaction as the event.
	sqlSelectEpochHead = `SELECT epoch, head FROM boundaries WHERE name = ?`

	// Checkpoints. The checkpoint only moves forward (max), never past the
	// head, and only for the holder of the current term (I3, I6).
	sqlSelectCheckpoint = `SELECT checkpoint FROM boundaries WHERE name = ?`
	sqlSaveCheckpoint   = `UPDATE boundaries SET checkpoint = max(checkpoint, ?1)
WHERE name = ?2 AND ?1 <= head
  AND EXISTS (SELECT 1 FROM leases WHERE boundary = ?2 AND holder = ?3 AND term = ?4)`
	sqlSelectHead = `SELECT head FROM boundaries WHERE name = ?`

	// Leases, in unix milliseconds of the store's clock.
	sqlSelectLease = `SELECT holder, term, expires_at FROM leases WHERE boundary = ?`
	sqlInsertLease = `INSERT INTO leases (boundary, holder, term, expires_at) VALUES (?, ?, 1, ?)`
	sqlExtendLease = `UPDATE leases SET expires_at = ? WHERE boundary = ? AND holder = ? AND term = ?`
	sqlTakeLease   = `UPDATE leases SET holder = ?, term = term + 1, expires_at = ? WHERE boundary = ? AND term = ? RETURNING term`
	sqlRenewLease  = `UPDATE leases SET expires_at = ?1
WHERE boundary = ?2 AND holder = ?3 AND term = ?4 AND expires_at > ?5`
	// A released lease expires at 0; one released already is left alone,
	// so its release is announced once (OnLeaseReleased).
	sqlReleaseLease = `UPDATE leases SET expires_at = 0 WHERE boundary = ? AND holder = ? AND term = ? AND expires_at <> 0`
)
