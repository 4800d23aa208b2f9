-- 0005: staged appends from the application's own transaction
-- (docs/outbox.md "orisun_enqueue", docs/design.md §13).
--
-- orisun_enqueue(boundary, events) validates as orisun_append does and
-- stages the events in orisun_staged, without taking the boundary's head
-- row: many application transactions enqueue to one boundary at once
-- without waiting for each other. The boundary's lease holder moves the
-- committed staged events into the log (orisun_move_staged), moving and
-- removing them in one transaction, so each enters the log exactly once,
-- at the next positions of the boundary (dense and commit-ordered, I1).
-- Their positions follow the order in which the mover finds them
-- committed, not the order in which the application's transactions began.
-- An event whose id the mover finds stored with other content is set
-- aside in orisun_set_aside with the reason, and the events behind it move.

-- The staged events: the request's events as orisun_append would store
-- them, until the mover takes them. call numbers the orisun_enqueue call
-- (the events of one call move together, in their order); seq is the
-- staging order. No foreign key to orisun_boundaries: its KEY SHARE lock
-- would mark the head row as held by every enqueuing transaction in the
-- eyes of the relay and the status (xmax), which read that as a
-- transaction holding the boundary. The unique (boundary, id) makes an
-- enqueue of an id staged by a transaction still open wait for that
-- transaction's end, and then judge the id against the committed row.
CREATE TABLE orisun_staged (
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    call        bigint      NOT NULL,
    boundary    text        NOT NULL,
    id          uuid        NOT NULL,
    type        text        NOT NULL,
    tags        text[]      NOT NULL,
    data        json        NOT NULL,
    metadata    json,
    enqueued_at timestamptz NOT NULL,
    CONSTRAINT orisun_staged_pkey PRIMARY KEY (seq),
    CONSTRAINT orisun_staged_boundary_id_key UNIQUE (boundary, id)
);

-- The mover's batch: a boundary's staged events in the order of the calls.
CREATE INDEX orisun_staged_boundary_call ON orisun_staged (boundary, call, seq);

CREATE SEQUENCE orisun_staged_call;

-- Staged events the mover could not move: their id is stored in the log
-- with other content (appended through the API or orisun_append after the
-- enqueue looked). They stay here, with the reason, until an operator
-- deals with them (docs/outbox.md); the status shows a boundary's count
-- and latest reason.
CREATE TABLE orisun_set_aside (
    seq          bigint      NOT NULL,
    boundary     text        NOT NULL,
    id           uuid        NOT NULL,
    type         text        NOT NULL,
    tags         text[]      NOT NULL,
    data         json        NOT NULL,
    metadata     json,
    enqueued_at  timestamptz NOT NULL,
    set_aside_at timestamptz NOT NULL,
    reason       text        NOT NULL,
    CONSTRAINT orisun_set_aside_pkey PRIMARY KEY (seq)
);

CREATE INDEX orisun_set_aside_boundary ON orisun_set_aside (boundary, set_aside_at);

-- orisun_enqueue stages events for the boundary's lease holder to move into
-- the log, and returns how many it staged. It validates as orisun_append
-- (orisun_prepare_events) and takes no lock of the boundary: its events
-- exist (staged) if and only if the caller commits. The mover learns of
-- them at the commit (NOTIFY orisun_staged) when the boundary's staging
-- was empty, else by its own scans (below). An id already in the log,
-- or staged and committed, with the same content is a no-op (not counted);
-- with other content it is refused (ORCFL), naming the event and the field.
CREATE FUNCTION orisun_enqueue(boundary text, events json) RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $fn$
#variable_conflict use_column
DECLARE
    b text := orisun_enqueue.boundary;
    ids uuid[];
    types text[];
    tagl text[];
    datas text[];
    mds text[];
    skip boolean[];
    inserted uuid[];
    st record;
    i integer;
    c bigint;
    staged integer;
BEGIN
    SELECT p.ids, p.types, p.tagl, p.datas, p.mds INTO ids, types, tagl, datas, mds
    FROM orisun_prepare_events(b, events, 'orisun_enqueue') p;
    PERFORM 1 FROM orisun_boundaries bd WHERE bd.name = b;
    IF NOT FOUND THEN
        PERFORM orisun_raise('ORNFD', format('boundary %s does not exist; create it first', to_json(b)));
    END IF;
    skip := array_fill(false, ARRAY[cardinality(ids)]);
    -- Ids in the log: the same content is a retry of an event moved
    -- already; other content a conflict.
    FOR st IN SELECT ev.id, ev.position, ev.type, ev.tags::text AS tags, ev.data::text AS data, ev.metadata::text AS metadata
              FROM orisun_events ev WHERE ev.boundary = b AND ev.id = ANY (ids) LOOP
        i := array_position(ids, st.id);
        IF st.type <> types[i] OR NOT orisun_json_same(st.data, datas[i]) OR NOT orisun_json_same(st.metadata, mds[i]) OR st.tags <> tagl[i] THEN
            PERFORM orisun_raise('ORCFL', format('events[%s].id: %s is already stored at position %s with other content; '
                'new events need new ids', i - 1, st.id, st.position));
        END IF;
        skip[i] := true;
    END LOOP;
    c := nextval('orisun_staged_call');
    -- An id staged by a transaction still open makes this INSERT wait for
    -- that transaction's end; it is then judged below against what that
    -- transaction committed.
    WITH ins AS (
        INSERT INTO orisun_staged (call, boundary, id, type, tags, data, metadata, enqueued_at)
        SELECT c, b, u.id, u.type, u.tags::text[], u.data::json, u.md::json, clock_timestamp()
        FROM unnest(ids, types, tagl, datas, mds, skip) WITH ORDINALITY AS u(id, type, tags, data, md, skip, ord)
        WHERE NOT u.skip
        ORDER BY u.ord
        ON CONFLICT (boundary, id) DO NOTHING
        RETURNING id)
    SELECT coalesce(array_agg(ins.id), '{}') INTO inserted FROM ins;
    staged := cardinality(inserted);
    IF staged + coalesce(cardinality(array_positions(skip, true)), 0) < cardinality(ids) THEN
        -- Some ids were staged by another call: the same content is a
        -- retry (a no-op), other content a conflict. A row moved into the
        -- log since is judged there.
        FOR i IN 1 .. cardinality(ids) LOOP
            CONTINUE WHEN skip[i] OR ids[i] = ANY (inserted);
            SELECT 'staged' AS place, NULL::bigint AS position, sg.type, sg.tags::text AS tags, sg.data::text AS data,
                   sg.metadata::text AS metadata INTO st
            FROM orisun_staged sg WHERE sg.boundary = b AND sg.id = ids[i];
            IF NOT FOUND THEN
                SELECT 'log' AS place, ev.position, ev.type, ev.tags::text AS tags, ev.data::text AS data,
                       ev.metadata::text AS metadata INTO st
                FROM orisun_events ev WHERE ev.boundary = b AND ev.id = ids[i];
            END IF;
            IF NOT FOUND THEN
                -- Under REPEATABLE READ or SERIALIZABLE this snapshot does
                -- not see the row the INSERT ran into.
                RAISE EXCEPTION USING ERRCODE = '40001',
                    MESSAGE = format('events[%s].id: %s was staged by a transaction that committed after this one began; retry the transaction',
                        i - 1, ids[i]);
            END IF;
            IF st.type <> types[i] OR NOT orisun_json_same(st.data, datas[i]) OR NOT orisun_json_same(st.metadata, mds[i]) OR st.tags <> tagl[i] THEN
                IF st.place = 'log' THEN
                    PERFORM orisun_raise('ORCFL', format('events[%s].id: %s is already stored at position %s with other content; '
                        'new events need new ids', i - 1, ids[i], st.position));
                END IF;
                PERFORM orisun_raise('ORCFL', format('events[%s].id: %s is already enqueued (not yet moved into the log) with other content; '
                    'new events need new ids', i - 1, ids[i]));
            END IF;
        END LOOP;
    END IF;
    -- The wake-up, only for the first enqueue after the staging drained:
    -- a NOTIFY serialises the commits of the transactions that notify (a
    -- global lock held from before the commit's WAL flush to its end), so
    -- that under load it would cost most of the enqueuing transactions'
    -- rate. A committed staged event of the boundary that this statement
    -- sees is one the mover has not moved yet (its move has not
    -- committed): the mover finds it, and after a move that found
    -- anything it scans again every few milliseconds until it has found
    -- nothing for a quiet period, so this call's events are found at its
    -- commit unless that commit comes after the quiet period. Then the
    -- node's head check (every ORISUN_POLL_INTERVAL) wakes the mover
    -- (docs/outbox.md "When the mover learns of an enqueue"). The events
    -- of this call (and of earlier calls of this transaction, which
    -- judged the same way) do not count. The index is read from the newest
    -- call down: the moved rows, dead but not yet vacuumed, are at the
    -- oldest end, and reading through them cost a millisecond under load.
    -- Under SERIALIZABLE the read is not made: it takes a predicate lock on
    -- the boundary's staged rows, which every other enqueuer's insert
    -- breaks, so two enqueuing transactions that overlap would fail each
    -- other with 40001 although neither waited. Such a call always
    -- notifies instead (the commits of notifying transactions are
    -- serialised: docs/outbox.md, "REPEATABLE READ and SERIALIZABLE"). A
    -- session that set orisun.notify to off never notifies (a transaction
    -- to be prepared for two-phase commit cannot have notified): the
    -- node's head check finds the staged events within
    -- ORISUN_POLL_INTERVAL (docs/outbox.md, "Two-phase commit").
    IF staged > 0 AND coalesce(current_setting('orisun.notify', true), '') <> 'off' THEN
        IF current_setting('transaction_isolation') <> 'serializable' THEN
            PERFORM 1 FROM orisun_staged sg WHERE sg.boundary = b AND sg.call <> c ORDER BY sg.call DESC LIMIT 1;
        END IF;
        IF current_setting('transaction_isolation') = 'serializable' OR NOT FOUND THEN
            -- Delivered at the commit, and only if the caller commits.
            PERFORM pg_notify('orisun_staged', b);
        END IF;
    END IF;
    RETURN staged;
END
$fn$;

-- orisun_move_staged moves the boundary's committed staged events into the
-- log, for the lease holder holder in term term only. It takes the head
-- row as an append does; then the lease row, read FOR SHARE, must name
-- them, unexpired in the database's clock, so a takeover waits for this
-- transaction and a stale holder moves nothing (ORLST). Then whole calls,
-- in the order of the calls, up to lim events (and always the first call
-- whole, whatever its size: orisun_enqueue refuses a call of more than
-- max_append_events, so that is the batch's floor). Rows of transactions
-- still open are not visible at all, so they never hold the mover back.
-- A visible row that another session holds a row lock on (FOR KEY SHARE
-- of a foreign key, an operator's SELECT … FOR UPDATE) fails the move
-- (55P03, lock_not_available, NOWAIT) rather than being skipped: skipping
-- it split its call and moved the calls behind it ahead of it, and moved
-- the row itself only after them, or never while the lock stayed. The
-- caller names the blocking session (MoveStaged).
-- Each event whose id is not in the log gets the next position; one
-- stored with the same content is dropped as a retry; one stored with
-- other content, or whose encoded size is now over the limits row's
-- max_event_bytes (lowered since the enqueue, docs/outbox.md "Changing the
-- limits"), is set aside with the reason. All of them leave orisun_staged
-- in the same transaction: each staged event enters the log at most once,
-- and does unless its transaction never committed. The events' time is
-- the move's. more: the batch was full (more may wait).
CREATE FUNCTION orisun_move_staged(boundary text, holder text, term bigint, lim integer,
    OUT moved integer, OUT duplicates integer, OUT set_aside integer,
    OUT first_position bigint, OUT last_position bigint, OUT more boolean)
LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
    b text := orisun_move_staged.boundary;
    h bigint;
    seqs bigint[];
    calls bigint[];
    moved_at timestamptz;
    max_bytes integer;
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        PERFORM orisun_raise('ORINV', format('lim is %s; it must be at least 1', lim));
    END IF;
    moved := 0; duplicates := 0; set_aside := 0; more := false;
    -- Nothing committed to move: the head and the lease are read, not
    -- locked, and nothing is written (no transaction id, no WAL flush at
    -- the commit). The mover scans often while enqueues come in
    -- (docs/outbox.md); most of those scans find nothing. What commits
    -- after this look is found by the next scan.
    -- (From the newest call down: the rows moved before, dead until
    -- vacuumed, are at the other end.)
    PERFORM 1 FROM orisun_staged s WHERE s.boundary = b ORDER BY s.call DESC LIMIT 1;
    IF NOT FOUND THEN
        SELECT bd.head INTO h FROM orisun_boundaries bd WHERE bd.name = b;
        IF NOT FOUND THEN
            PERFORM orisun_raise('ORNFD', format('boundary %s does not exist', to_json(b)));
        END IF;
        PERFORM 1 FROM orisun_leases l
        WHERE l.boundary = b AND l.holder = orisun_move_staged.holder AND l.term = orisun_move_staged.term
          AND l.expires_at > clock_timestamp();
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'ORLST', HINT = 'lease_lost',
                MESSAGE = format('boundary %s: %s does not hold the lease in term %s (expired, or another term began): it moves nothing',
                    to_json(b), to_json(orisun_move_staged.holder), orisun_move_staged.term);
        END IF;
        first_position := h + 1;
        last_position := h;
        RETURN;
    END IF;
    UPDATE orisun_boundaries bd SET head = bd.head WHERE bd.name = b RETURNING bd.head INTO h;
    IF NOT FOUND THEN
        PERFORM orisun_raise('ORNFD', format('boundary %s does not exist', to_json(b)));
    END IF;
    -- The fence, after the head row: a move waiting for the head row (an
    -- application transaction holding it after orisun_append) must not
    -- hold the lease row meanwhile, which the holder's renewals and
    -- checkpoint writes update.
    PERFORM 1 FROM orisun_leases l
    WHERE l.boundary = b AND l.holder = orisun_move_staged.holder AND l.term = orisun_move_staged.term
      AND l.expires_at > clock_timestamp()
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'ORLST', HINT = 'lease_lost',
            MESSAGE = format('boundary %s: %s does not hold the lease in term %s (expired, or another term began): it moves nothing',
                to_json(b), to_json(orisun_move_staged.holder), orisun_move_staged.term);
    END IF;
    -- The time of the events, taken once the head row is held: after
    -- every event before them.
    moved_at := clock_timestamp();
    first_position := h + 1;
    last_position := h;
    SELECT lm.max_event_bytes INTO max_bytes FROM orisun_append_limits lm;
    -- Every statement from here sees what committed before the head row
    -- was granted (READ COMMITTED). Rows of transactions still open are
    -- not seen at all; a row someone else has locked fails the move
    -- (NOWAIT): the move must not wait for it holding the head and lease
    -- rows, nor pass it.
    SELECT array_agg(sg.seq ORDER BY sg.call, sg.seq), array_agg(sg.call ORDER BY sg.call, sg.seq) INTO seqs, calls
    FROM (SELECT s.seq, s.call FROM orisun_staged s WHERE s.boundary = b ORDER BY s.call, s.seq LIMIT lim + 1
          FOR UPDATE NOWAIT) sg;
    IF seqs IS NULL THEN
        RETURN;
    END IF;
    -- One row beyond the batch says whether its last call goes on.
    IF cardinality(seqs) > lim THEN
        more := true;
        IF calls[lim + 1] <> calls[lim] THEN
            seqs := seqs[1 : lim];
        ELSIF calls[1] <> calls[lim] THEN
            -- Whole calls only: the last one goes on beyond the batch.
            seqs := seqs[1 : lim - cardinality(array_positions(calls[1 : lim], calls[lim]))];
        ELSE
            -- A single call larger than the batch moves whole.
            SELECT array_agg(s.seq ORDER BY s.seq) INTO seqs FROM (
                SELECT s.seq FROM orisun_staged s WHERE s.boundary = b AND s.call = calls[1] FOR UPDATE NOWAIT) s;
        END IF;
    END IF;
    WITH batch AS (
        SELECT s.*, ev.position AS stored,
               ev.id IS NOT NULL AND ev.type = s.type AND orisun_json_same(ev.data::text, s.data::text)
                   AND orisun_json_same(ev.metadata::text, s.metadata::text) AND ev.tags = s.tags AS same,
               CASE WHEN ev.id IS NULL AND max_bytes IS NOT NULL
                    THEN orisun_encoded_size(b, s.id::text, s.type, s.tags, s.data::text, s.metadata::text) END AS size
        FROM orisun_staged s LEFT JOIN orisun_events ev ON ev.boundary = b AND ev.id = s.id
        WHERE s.seq = ANY (seqs)),
    fresh AS (
        SELECT bt.*, row_number() OVER (ORDER BY bt.call, bt.seq) AS ord FROM batch bt
        WHERE bt.stored IS NULL AND NOT coalesce(bt.size > max_bytes, false)),
    ins AS (
        INSERT INTO orisun_events (boundary, position, id, type, time, tags, data, metadata)
        SELECT b, h + fr.ord, fr.id, fr.type, moved_at, fr.tags, fr.data, fr.metadata FROM fresh fr ORDER BY fr.ord
        RETURNING 1),
    aside AS (
        INSERT INTO orisun_set_aside (seq, boundary, id, type, tags, data, metadata, enqueued_at, set_aside_at, reason)
        SELECT bt.seq, b, bt.id, bt.type, bt.tags, bt.data, bt.metadata, bt.enqueued_at, moved_at,
               CASE WHEN bt.stored IS NOT NULL
                    THEN format('id %s was enqueued at %s and is stored at position %s with other content (appended meanwhile by '
                        'the API or orisun_append); the enqueued event was not moved', bt.id, bt.enqueued_at, bt.stored)
                    ELSE format('id %s was enqueued at %s; its encoded event is %s bytes, over the limit max_event_bytes %s '
                        '(orisun_append_limits, lowered since the enqueue; the NATS max payload): the enqueued event was not moved',
                        bt.id, bt.enqueued_at, bt.size, max_bytes) END
        FROM batch bt WHERE (bt.stored IS NOT NULL AND NOT bt.same) OR coalesce(bt.size > max_bytes, false)
        RETURNING 1),
    del AS (
        DELETE FROM orisun_staged s WHERE s.seq = ANY (seqs) RETURNING 1)
    SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM batch WHERE same), (SELECT count(*) FROM aside)
    INTO moved, duplicates, set_aside;
    IF moved > 0 THEN
        UPDATE orisun_boundaries bd SET head = h + moved WHERE bd.name = b;
        last_position := h + moved;
        PERFORM pg_notify('orisun_events', b);
    END IF;
END
$fn$;

-- orisun_enqueue for drivers that bind the events as text or jsonb (as
-- orisun_append's overloads in 0004).
CREATE FUNCTION orisun_enqueue(boundary text, events text) RETURNS integer
LANGUAGE sql VOLATILE AS $$
    SELECT orisun_enqueue(boundary, events::json)
$$;
CREATE FUNCTION orisun_enqueue(boundary text, events jsonb) RETURNS integer
LANGUAGE sql VOLATILE AS $$
    SELECT orisun_enqueue(boundary, events::json)
$$;

-- orisun_enqueue to the application role (orisun_app_role()); the mover
-- is orisun's alone (0004, orisun_secure).
SELECT orisun_secure(
    ARRAY['orisun_enqueue(text, json)', 'orisun_move_staged(text, text, bigint, integer)',
          'orisun_enqueue(text, text)', 'orisun_enqueue(text, jsonb)']::regprocedure[],
    ARRAY['orisun_enqueue(text, json)', 'orisun_enqueue(text, text)', 'orisun_enqueue(text, jsonb)']::regprocedure[]);
