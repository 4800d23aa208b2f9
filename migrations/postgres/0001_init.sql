-- 0001: the first schema of orisun on PostgreSQL (docs/design.md §2, §3, §9).
--
-- The same logical schema as the SQLite one, with every table prefixed
-- orisun_ so orisun can share a database (and its search_path) with an
-- application. Every boundary name, id, type and tag is a value bound as a
-- parameter; nothing here is ever built from user input.

-- One row per boundary. head is the last committed position: the append
-- transaction takes this row (SELECT … FOR NO KEY UPDATE, then UPDATE … SET
-- head = head + n … RETURNING), which serialises the appenders of one
-- boundary from the position draw to the commit and so makes positions dense
-- and commit-ordered (I1). The checkpoint is not here but on the lease row:
-- an append transaction held open (a slow appender) holds this row, and the
-- publisher's checkpoint write must not wait for it. The name check
-- repeats the validation of the application (event.ValidateBoundaryName) as
-- a last line of defence: a name is also a NATS subject token for ever.
CREATE TABLE orisun_boundaries (
    name       text        NOT NULL,
    epoch      uuid        NOT NULL,
    head       bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orisun_boundaries_pkey PRIMARY KEY (name),
    CONSTRAINT orisun_boundaries_name_check CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    CONSTRAINT orisun_boundaries_head_check CHECK (head >= 0)
);

-- The log, clustered in practice by (boundary, position): a read "after P"
-- is one range scan of the primary key. time is the commit time (the
-- group transaction's timestamp, in the database's clock).
--
-- data and metadata are json, not jsonb: json keeps the exact bytes the
-- client sent (already compacted by event.Prepare), so an idempotent retry
-- compares byte for byte and the stream body carries the event as it was
-- appended. jsonb would reorder keys and drop duplicates. metadata is NULL
-- when absent. tags is never NULL: no tags is the empty array.
CREATE TABLE orisun_events (
    boundary text        NOT NULL,
    position bigint      NOT NULL,
    id       uuid        NOT NULL,
    type     text        NOT NULL,
    time     timestamptz NOT NULL,
    tags     text[]      NOT NULL,
    data     json        NOT NULL,
    metadata json,
    CONSTRAINT orisun_events_pkey PRIMARY KEY (boundary, position),
    -- An id is unique within its boundary: the idempotent-retry lookup, and
    -- the error an append of a stored id runs into (the store then decides
    -- between a retry and a conflict).
    CONSTRAINT orisun_events_boundary_id_key UNIQUE (boundary, id),
    CONSTRAINT orisun_events_position_check CHECK (position > 0)
);

-- Queries and conditions by tag: tags @> '{a,b}' (every tag of a query
-- item) is answered by this index.
CREATE INDEX orisun_events_tags ON orisun_events USING gin (tags);

-- Queries and conditions by type scan only the matching events, in
-- position order.
CREATE INDEX orisun_events_boundary_type_position ON orisun_events (boundary, type, position);

-- The per-boundary lease of docs/design.md §9, in the database's clock. term grows
-- by one on every change of holder or expiry; a released lease is expired,
-- not deleted, so the next acquisition starts the next term.
--
-- checkpoint is the publisher's last acknowledged position (I3): it only
-- moves forward, never beyond the head, and only by the row's current
-- holder and term. Keeping it on the lease row makes the fence part of the
-- row the write locks: a takeover committed meanwhile is re-checked by the
-- update itself. 0 (no row) means nothing was published yet.
CREATE TABLE orisun_leases (
    boundary   text        NOT NULL,
    holder     text        NOT NULL,
    term       bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    checkpoint bigint      NOT NULL DEFAULT 0,
    CONSTRAINT orisun_leases_pkey PRIMARY KEY (boundary),
    CONSTRAINT orisun_leases_boundary_fkey FOREIGN KEY (boundary) REFERENCES orisun_boundaries (name),
    CONSTRAINT orisun_leases_term_check CHECK (term > 0),
    CONSTRAINT orisun_leases_checkpoint_check CHECK (checkpoint >= 0)
);
