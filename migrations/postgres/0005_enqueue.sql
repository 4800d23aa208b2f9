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

-- orisun_prepare_events is the validation of an append request's events
-- (event.Prepare), shared by orisun_append and orisun_enqueue: it refuses
-- what the API refuses, with the same kind of error, before anything is
-- taken or written, and returns the events as parallel arrays (ids, with
-- UUIDv7 ids generated where none is given; types; tags as text[]
-- literals; data and metadata as compacted JSON texts). fn names the
-- calling function in the messages that must name it.
CREATE FUNCTION orisun_prepare_events(b text, events json, fn text,
    OUT ids uuid[], OUT types text[], OUT tagl text[], OUT datas text[], OUT mds text[])
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $fn$
DECLARE
    lim orisun_append_limits;
    n integer;
    i integer;
    e json;
    kv record;
    seen text[];
    vid json;
    vtype json;
    vdata json;
    vmd json;
    vtags json;
    ty text;
    v json;
    f text;
    s text;
    tags text[];
    d text;
    md text;
    id uuid;
    j integer;
    total bigint := 0;
    size integer;
BEGIN
    ids := '{}'; types := '{}'; tagl := '{}'; datas := '{}'; mds := '{}';
    IF b IS NULL OR b = '' THEN
        PERFORM orisun_raise('ORINV', 'boundary name is empty; it must match ^[a-z][a-z0-9_]{0,62}$');
    ELSIF octet_length(b) > 63 THEN
        PERFORM orisun_raise('ORINV', format('boundary name is %s bytes long, the limit is 63', octet_length(b)));
    ELSIF b !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM orisun_raise('ORINV', format('boundary name %s is not allowed; a name must match ^[a-z][a-z0-9_]{0,62}$', to_json(b)));
    END IF;
    IF events IS NULL OR json_typeof(events) <> 'array' THEN
        PERFORM orisun_raise('ORINV', format('events: a JSON %s cannot be a list of events; send a JSON array',
            coalesce(json_typeof(events), 'null')));
    END IF;
    n := json_array_length(events);
    IF n = 0 THEN
        PERFORM orisun_raise('ORINV', 'events: the append holds no events; send at least one');
    END IF;
    -- PostgreSQL's JSON functions cannot read a string holding the escape
    -- \u0000 (NUL) into text, and fail with a message naming no field:
    -- refused here, by name. (The API accepts NUL inside data and metadata;
    -- such an event goes through the API.)
    IF strpos(events::text, '\u0000') > 0 AND events::text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
        PERFORM orisun_raise('ORINV', format('events: a JSON string holds \u0000 (NUL), which %s cannot read; '
            'a tag cannot hold NUL, and data or metadata holding it must be appended through the API', fn));
    END IF;
    -- The API decodes the whole request before it checks any limit, so
    -- what its decoding refuses (an event that is no object, an unknown
    -- field, a field of the wrong JSON type, a key given twice) is judged
    -- first, for every event: the same request gets the same kind of
    -- error from both.
    i := -1;
    FOR e IN SELECT json_array_elements(events) LOOP
        i := i + 1;
        f := format('events[%s]', i);
        IF json_typeof(e) <> 'object' THEN
            PERFORM orisun_raise('ORINV', format('%s: a JSON %s cannot be an event; send an object', f, json_typeof(e)));
        END IF;
        seen := '{}';
        FOR kv IN SELECT key, value FROM json_each(e) LOOP
            IF kv.key <> ALL ('{id,type,data,metadata,tags}') THEN
                PERFORM orisun_raise('ORINV', format('%s: unknown field %s; the fields are id, type, data, metadata, tags', f, to_json(kv.key)));
            END IF;
            IF kv.key = ANY (seen) THEN
                PERFORM orisun_raise('ORINV', format('duplicate key %s in %s', to_json(kv.key), f));
            END IF;
            seen := seen || kv.key;
            IF kv.key IN ('id', 'type') AND json_typeof(kv.value) NOT IN ('string', 'null') THEN
                PERFORM orisun_raise('ORINV', format('%s.%s: a JSON %s cannot be a string', f, kv.key, json_typeof(kv.value)));
            END IF;
            IF kv.key = 'tags' THEN
                PERFORM orisun_strings(kv.value, f || ': tags', 2147483647);
            END IF;
        END LOOP;
    END LOOP;
    SELECT * INTO lim FROM orisun_append_limits;
    IF NOT FOUND THEN
        PERFORM orisun_raise('ORUNV', 'no orisun node has recorded its append limits in orisun_append_limits yet; start orisun on this database once');
    END IF;
    IF n > lim.max_append_events THEN
        PERFORM orisun_raise('ORBIG', format('events: the append holds %s events, the limit is %s', n, lim.max_append_events));
    END IF;
    -- One pass over the array: events -> i would parse the whole array
    -- text again for every event (64 events of 1 KB took 22 ms).
    i := -1;
    FOR e IN SELECT json_array_elements(events) LOOP
        i := i + 1;
        f := format('events[%s]', i);
        -- One parse of the event: its fields as JSON values (the exact
        -- text of each). The pass above refused what is no object, and
        -- unknown and repeated keys.
        vid := NULL; vtype := NULL; vdata := NULL; vmd := NULL; vtags := NULL;
        FOR kv IN SELECT key, value FROM json_each(e) LOOP
            CASE kv.key
                WHEN 'id' THEN vid := kv.value;
                WHEN 'type' THEN vtype := kv.value;
                WHEN 'data' THEN vdata := kv.value;
                WHEN 'metadata' THEN vmd := kv.value;
                ELSE vtags := kv.value;
            END CASE;
        END LOOP;
        v := vid;
        IF v IS NULL OR json_typeof(v) = 'null' OR v::text = '""' THEN
            -- No id, or the empty one (the API's "generate one").
            id := orisun_uuidv7();
        ELSIF json_typeof(v) <> 'string' THEN
            PERFORM orisun_raise('ORINV', format('%s.id: a JSON %s cannot be a string', f, json_typeof(v)));
        ELSE
            s := v #>> '{}';
            IF s !~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN
                PERFORM orisun_raise('ORINV', format('%s: id %s is not a UUID in its 36-character form', f, to_json(left(s, 64))));
            END IF;
            id := s::uuid;
        END IF;
        v := vtype;
        IF v IS NOT NULL AND json_typeof(v) NOT IN ('string', 'null') THEN
            PERFORM orisun_raise('ORINV', format('%s.type: a JSON %s cannot be a string', f, json_typeof(v)));
        END IF;
        ty := v #>> '{}';
        PERFORM orisun_check_type(ty, f || ': type');
        v := vdata;
        IF v IS NULL OR json_typeof(v) = 'null' THEN
            PERFORM orisun_raise('ORINV', f || ': data is missing; it must be a JSON value');
        END IF;
        d := orisun_json_compact(v);
        v := vmd;
        md := CASE WHEN v IS NULL OR json_typeof(v) = 'null' THEN NULL ELSE orisun_json_compact(v) END;
        v := vtags;
        IF v IS NOT NULL AND json_typeof(v) = 'array' AND json_array_length(v) > 64 THEN
            PERFORM orisun_raise('ORBIG', format('%s: tags: the event has %s tags, the limit is 64', f, json_array_length(v)));
        END IF;
        tags := orisun_strings(v, f || ': tags', 64);
        FOR j IN 1 .. coalesce(array_length(tags, 1), 0) LOOP
            PERFORM orisun_check_tag(tags[j], format('%s: tags[%s]', f, j - 1));
        END LOOP;
        j := array_position(ids, id);
        IF j IS NOT NULL THEN
            PERFORM orisun_raise('ORINV', format('%s.id: %s is also the id of events[%s]; ids must be unique', f, id, j - 1));
        END IF;
        size := orisun_encoded_size(b, id::text, ty, tags, d, md);
        IF size > lim.max_event_bytes THEN
            PERFORM orisun_raise('ORBIG', format('%s: the encoded event is %s bytes, the limit (NATS max payload) is %s',
                f, size, lim.max_event_bytes));
        END IF;
        total := total + 36 + octet_length(ty) + octet_length(d) + coalesce(octet_length(md), 0)
            + coalesce((SELECT sum(octet_length(t) + 3) FROM unnest(tags) t), 0);
        IF total > lim.max_append_bytes THEN
            PERFORM orisun_raise('ORBIG', format('events: the append is over %s bytes (at events[%s]), the limit is %s',
                total, i, lim.max_append_bytes));
        END IF;
        ids := ids || id;
        types := types || ty;
        tagl := tagl || tags::text;
        datas := datas || d;
        mds := mds || md;
    END LOOP;
END
$fn$;

-- orisun_append as in 0004, its validation now orisun_prepare_events
-- (the same checks, in the same order, with the same messages).
CREATE OR REPLACE FUNCTION orisun_append(boundary text, events json, condition json DEFAULT NULL)
RETURNS TABLE (epoch uuid, first_position bigint, last_position bigint)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    b text := orisun_append.boundary;
    n integer;
    i integer;
    v json;
    f text;
    ids uuid[];
    types text[];
    tagl text[];
    datas text[];
    mds text[];
    tags text[];
    j integer;
    cafter bigint := 0;
    items json;
    -- The condition's query items as parallel arrays of text[] literals.
    qtypes text[] := '{}';
    qtags text[] := '{}';
    h bigint;
    ep uuid;
    st record;
    fpos bigint;
    nstored integer := 0;
    m bigint;
BEGIN
    -- Validation, before anything is taken or written (event.Prepare).
    SELECT p.ids, p.types, p.tagl, p.datas, p.mds INTO ids, types, tagl, datas, mds
    FROM orisun_prepare_events(b, events, 'orisun_append') p;
    n := cardinality(ids);
    IF condition IS NOT NULL AND json_typeof(condition) <> 'null' THEN
        IF condition::text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
            PERFORM orisun_raise('ORINV', 'condition: a JSON string holds \u0000 (NUL), which no type or tag can hold');
        END IF;
        IF json_typeof(condition) <> 'object' THEN
            PERFORM orisun_raise('ORINV', format('condition: a JSON %s cannot be a condition; send an object', json_typeof(condition)));
        END IF;
        PERFORM orisun_check_keys(condition, '{query,after}', 'condition');
        v := condition -> 'after';
        IF v IS NOT NULL AND json_typeof(v) <> 'null' THEN
            IF json_typeof(v) <> 'number' OR (v::text) !~ '^[0-9]+$' THEN
                PERFORM orisun_raise('ORINV', format('condition.after: %s is not a position (a whole number from 0)', v::text));
            END IF;
            IF length(v::text) > 20 OR (v::text)::numeric > 18446744073709551615 THEN
                PERFORM orisun_raise('ORINV', format('condition.after: %s is beyond the largest position 18446744073709551615', v::text));
            END IF;
            -- Positions beyond a bigint are beyond every head: the Go
            -- append clamps them the same way (backend.ClampPosition).
            cafter := least((v::text)::numeric, 9223372036854775807)::bigint;
        END IF;
        v := condition -> 'query';
        IF v IS NOT NULL AND json_typeof(v) <> 'null' THEN
            IF json_typeof(v) <> 'object' THEN
                PERFORM orisun_raise('ORINV', format('condition.query: a JSON %s cannot be a query; send an object', json_typeof(v)));
            END IF;
            PERFORM orisun_check_keys(v, '{items}', 'condition.query');
            items := v -> 'items';
            IF items IS NOT NULL AND json_typeof(items) = 'null' THEN
                items := NULL;
            ELSIF items IS NOT NULL AND json_typeof(items) <> 'array' THEN
                PERFORM orisun_raise('ORINV', format('condition.query.items: a JSON %s cannot be a list of items', json_typeof(items)));
            END IF;
            IF items IS NOT NULL AND json_array_length(items) > 64 THEN
                PERFORM orisun_raise('ORBIG', format('query has %s items, the limit is 64', json_array_length(items)));
            END IF;
            FOR j IN 0 .. coalesce(json_array_length(items), 0) - 1 LOOP
                f := format('query item %s', j);
                IF json_typeof(items -> j) <> 'object' THEN
                    PERFORM orisun_raise('ORINV', format('%s: a JSON %s cannot be a query item', f, json_typeof(items -> j)));
                END IF;
                PERFORM orisun_check_keys(items -> j, '{types,tags}', f);
                tags := orisun_strings(items -> j -> 'types', f || ': types', 64);
                FOR i IN 1 .. coalesce(array_length(tags, 1), 0) LOOP
                    PERFORM orisun_check_type(tags[i], f);
                END LOOP;
                qtypes := qtypes || tags::text;
                tags := orisun_strings(items -> j -> 'tags', f || ': tags', 64);
                FOR i IN 1 .. coalesce(array_length(tags, 1), 0) LOOP
                    PERFORM orisun_check_tag(tags[i], f);
                END LOOP;
                qtags := qtags || tags::text;
            END LOOP;
        END IF;
    END IF;

    -- Take the head row (the lock of the Go append's sqlLockHead). Under
    -- READ COMMITTED every statement after it takes a new snapshot, which
    -- holds every event the previous holder committed: the condition is
    -- authoritative. Under REPEATABLE READ or SERIALIZABLE, a head row
    -- changed since the transaction's snapshot fails this UPDATE with a
    -- serialization failure, and the caller retries its transaction.
    UPDATE orisun_boundaries bd SET head = bd.head WHERE bd.name = b RETURNING bd.head, bd.epoch INTO h, ep;
    IF NOT FOUND THEN
        PERFORM orisun_raise('ORNFD', format('boundary %s does not exist; create it first', to_json(b)));
    END IF;

    -- Stored ids: an idempotent retry, judged before the condition as the
    -- Go append does (sqlstore.Retry): every event stored with the same
    -- content at consecutive positions in order returns those positions;
    -- anything else is a conflict.
    -- One lookup of them all first: a new append (the usual case) has
    -- none stored.
    PERFORM 1 FROM orisun_events ev WHERE ev.boundary = b AND ev.id = ANY (ids) AND ev.position <= h LIMIT 1;
    FOR i IN 1 .. CASE WHEN FOUND THEN n ELSE 0 END LOOP
        SELECT ev.position, ev.type, ev.tags, ev.data::text AS data, ev.metadata::text AS metadata INTO st
        FROM orisun_events ev WHERE ev.boundary = b AND ev.id = ids[i] AND ev.position <= h;
        IF FOUND THEN
            IF nstored = 0 AND i > 1 THEN
                PERFORM orisun_raise('ORCFL', format('events[%s].id %s is already stored at position %s but events[0].id %s is not; '
                    'a retry must resend exactly the events of the original append, new events need new ids',
                    i - 1, ids[i], st.position, ids[1]));
            END IF;
            IF nstored = 0 THEN
                fpos := st.position;
            END IF;
            nstored := nstored + 1;
            IF st.type <> types[i] OR st.data <> datas[i] OR st.metadata IS DISTINCT FROM mds[i] OR st.tags::text <> tagl[i] THEN
                PERFORM orisun_raise('ORCFL', format('events[%s].id %s is already stored at position %s with other content',
                    i - 1, ids[i], st.position));
            END IF;
            IF st.position <> fpos + i - 1 THEN
                PERFORM orisun_raise('ORCFL', format('events[%s].id %s is stored at position %s, not right after events[0].id %s '
                    '(position %s); a retry must resend the events in their original order', i - 1, ids[i], st.position, ids[1], fpos));
            END IF;
        ELSIF nstored > 0 THEN
            PERFORM orisun_raise('ORCFL', format('events[0].id %s is already stored at position %s but events[%s].id %s is not; '
                'a retry must resend exactly the events of the original append, new events need new ids',
                ids[1], fpos, i - 1, ids[i]));
        END IF;
    END LOOP;
    IF nstored > 0 THEN
        RETURN QUERY SELECT ep, fpos, fpos + n - 1;
        RETURN;
    END IF;

    -- The condition (docs/design.md §4): the first event after its position,
    -- up to the head, that matches any item of its query (an item matches
    -- an event of one of its types, any when none, carrying all its tags).
    IF condition IS NOT NULL AND json_typeof(condition) <> 'null' THEN
        SELECT ev.position INTO m FROM orisun_events ev
        WHERE ev.boundary = b AND ev.position > cafter AND ev.position <= h
          AND (cardinality(qtypes) = 0 OR EXISTS (
              SELECT 1 FROM unnest(qtypes, qtags) AS it(types, tags)
              WHERE (it.types = '{}' OR ev.type = ANY (it.types::text[])) AND ev.tags @> it.tags::text[]))
        ORDER BY ev.position LIMIT 1;
        IF FOUND THEN
            PERFORM orisun_raise('ORCFL', format('boundary %s: condition failed: an event matching the query exists at position %s (after %s)',
                to_json(b), m, cafter));
        END IF;
    END IF;

    UPDATE orisun_boundaries bd SET head = bd.head + n WHERE bd.name = b;
    INSERT INTO orisun_events (boundary, position, id, type, time, tags, data, metadata)
    SELECT b, h + u.ord, u.id, u.type, clock_timestamp(), u.tags::text[], u.data::json, u.md::json
    FROM unnest(ids, types, tagl, datas, mds) WITH ORDINALITY AS u(id, type, tags, data, md, ord);
    -- Delivered at the commit, and only if the caller commits.
    PERFORM pg_notify('orisun_events', b);
    RETURN QUERY SELECT ep, h + 1, h + n;
END
$fn$;

-- orisun_enqueue stages events for the boundary's lease holder to move into
-- the log, and returns how many it staged. It validates as orisun_append
-- (orisun_prepare_events) and takes no lock of the boundary: its events
-- exist (staged) if and only if the caller commits, and the mover learns
-- of them at the commit (NOTIFY orisun_staged). An id already in the log,
-- or staged and committed, with the same content is a no-op (not counted);
-- with other content it is refused (ORCFL), naming the event and the field.
CREATE FUNCTION orisun_enqueue(boundary text, events json) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
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
        IF st.type <> types[i] OR st.data <> datas[i] OR st.metadata IS DISTINCT FROM mds[i] OR st.tags <> tagl[i] THEN
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
            IF st.type <> types[i] OR st.data <> datas[i] OR st.metadata IS DISTINCT FROM mds[i] OR st.tags <> tagl[i] THEN
                IF st.place = 'log' THEN
                    PERFORM orisun_raise('ORCFL', format('events[%s].id: %s is already stored at position %s with other content; '
                        'new events need new ids', i - 1, ids[i], st.position));
                END IF;
                PERFORM orisun_raise('ORCFL', format('events[%s].id: %s is already enqueued (not yet moved into the log) with other content; '
                    'new events need new ids', i - 1, ids[i]));
            END IF;
        END LOOP;
    END IF;
    IF staged > 0 THEN
        -- Delivered at the commit, and only if the caller commits.
        PERFORM pg_notify('orisun_staged', b);
    END IF;
    RETURN staged;
END
$fn$;

-- orisun_move_staged moves the boundary's committed staged events into the
-- log, for the lease holder holder in term term only. It takes the head
-- row as an append does; then the lease row, read FOR SHARE, must name
-- them, unexpired in the database's clock, so a takeover waits for this
-- transaction and a stale holder moves nothing (ORLST). Then at most lim
-- events (whole calls; a call larger than lim alone) in the order of the
-- calls, skipping rows another transaction has locked (SKIP LOCKED; rows
-- of transactions still open are not visible at all, so they never hold
-- the mover back). Each event whose id
-- is not in the log gets the next position; one stored with the same
-- content is dropped as a retry; one stored with other content is set
-- aside with the reason. All of them leave orisun_staged in the same
-- transaction: each staged event enters the log at most once, and does
-- unless its transaction never committed. The events' time is the move's.
-- more: the batch was full (more may wait).
CREATE FUNCTION orisun_move_staged(boundary text, holder text, term bigint, lim integer,
    OUT moved integer, OUT duplicates integer, OUT set_aside integer,
    OUT first_position bigint, OUT last_position bigint, OUT more boolean)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    b text := orisun_move_staged.boundary;
    h bigint;
    seqs bigint[];
    calls bigint[];
    moved_at timestamptz;
BEGIN
    IF lim IS NULL OR lim < 1 THEN
        PERFORM orisun_raise('ORINV', format('lim is %s; it must be at least 1', lim));
    END IF;
    moved := 0; duplicates := 0; set_aside := 0; more := false;
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
    -- Every statement from here sees what committed before the head row
    -- was granted (READ COMMITTED). Rows of transactions still open are
    -- not seen at all; SKIP LOCKED passes rows another mover holds.
    SELECT array_agg(sg.seq ORDER BY sg.call, sg.seq), array_agg(sg.call ORDER BY sg.call, sg.seq) INTO seqs, calls
    FROM (SELECT s.seq, s.call FROM orisun_staged s WHERE s.boundary = b ORDER BY s.call, s.seq LIMIT lim + 1
          FOR UPDATE SKIP LOCKED) sg;
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
                SELECT s.seq FROM orisun_staged s WHERE s.boundary = b AND s.call = calls[1] FOR UPDATE SKIP LOCKED) s;
        END IF;
    END IF;
    WITH batch AS (
        SELECT s.*, ev.position AS stored,
               ev.id IS NOT NULL AND ev.type = s.type AND ev.data::text = s.data::text
                   AND ev.metadata::text IS NOT DISTINCT FROM s.metadata::text AND ev.tags = s.tags AS same
        FROM orisun_staged s LEFT JOIN orisun_events ev ON ev.boundary = b AND ev.id = s.id
        WHERE s.seq = ANY (seqs)),
    fresh AS (
        SELECT bt.*, row_number() OVER (ORDER BY bt.call, bt.seq) AS ord FROM batch bt WHERE bt.stored IS NULL),
    ins AS (
        INSERT INTO orisun_events (boundary, position, id, type, time, tags, data, metadata)
        SELECT b, h + fr.ord, fr.id, fr.type, moved_at, fr.tags, fr.data, fr.metadata FROM fresh fr ORDER BY fr.ord
        RETURNING 1),
    aside AS (
        INSERT INTO orisun_set_aside (seq, boundary, id, type, tags, data, metadata, enqueued_at, set_aside_at, reason)
        SELECT bt.seq, b, bt.id, bt.type, bt.tags, bt.data, bt.metadata, bt.enqueued_at, moved_at,
               format('id %s was enqueued at %s and is stored at position %s with other content (appended meanwhile by '
                   'the API or orisun_append); the enqueued event was not moved', bt.id, bt.enqueued_at, bt.stored)
        FROM batch bt WHERE bt.stored IS NOT NULL AND NOT bt.same
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
