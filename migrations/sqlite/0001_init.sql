-- 0001: the first schema of orisun on SQLite (docs/design.md §2, §3, §9).
--
-- Every boundary name, id, type and tag is a value bound as a parameter;
-- nothing here is ever built from user input.

-- One row per boundary. head is the last committed position: the append
-- transaction takes it with UPDATE ... SET head = head + n ... RETURNING, which
-- is what makes positions dense and commit-ordered (I1). checkpoint is the
-- publisher's last acknowledged position (I3). created_at is unix nanoseconds.
CREATE TABLE boundaries (
    name       TEXT    NOT NULL PRIMARY KEY,
    epoch      TEXT    NOT NULL,
    head       INTEGER NOT NULL DEFAULT 0,
    checkpoint INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);

-- The log. WITHOUT ROWID keeps events clustered by (boundary, position), so
-- a read "after P" is one range scan. time is the commit time in unix
-- nanoseconds, UTC; tags is a JSON array of strings; metadata is NULL when
-- absent.
CREATE TABLE events (
    boundary TEXT    NOT NULL,
    position INTEGER NOT NULL,
    id       TEXT    NOT NULL,
    type     TEXT    NOT NULL,
    time     INTEGER NOT NULL,
    tags     TEXT    NOT NULL,
    data     TEXT    NOT NULL,
    metadata TEXT,
    PRIMARY KEY (boundary, position)
) WITHOUT ROWID;

-- An id is unique within its boundary: the idempotent-retry lookup and the
-- last line of defence against a duplicate insert.
CREATE UNIQUE INDEX events_boundary_id ON events (boundary, id);

-- Queries and conditions by type scan only the matching events, in position
-- order.
CREATE INDEX events_boundary_type_position ON events (boundary, type, position);

-- The per-boundary lease of docs/design.md §9. term grows by one on every change of
-- holder or expiry; expires_at is unix milliseconds in the store's clock.
CREATE TABLE leases (
    boundary   TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    term       INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
