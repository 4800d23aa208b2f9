-- 0004: appends from the application's own transaction (docs/outbox.md,
-- docs/design.md §13).
--
-- orisun_append(boundary, events, condition) appends in the caller's
-- transaction, with the same validation, idempotency and condition as the
-- API's append (docs/design.md §3, §4): its events exist if and only if the
-- caller commits, and the relay learns of them at the commit (NOTIFY on
-- the channel the Go append uses). It takes the boundary's head row as the
-- Go append does, so the row stays held until the caller's transaction
-- ends: positions stay dense and commit-ordered (I1), and the boundary's
-- other appends wait for that transaction.
--
-- Errors a caller can cause have their own SQLSTATE class, OR:
--   ORINV invalid, ORBIG too large, ORNFD not found, ORCFL conflict,
--   ORUNV unavailable (no node has recorded its limits yet).
-- The message names the event (events[i]), the field and the limit, in the
-- words of the API where there are some.

-- Who may call what (docs/outbox.md "Privileges"). orisun_append and
-- orisun_enqueue are SECURITY DEFINER: they run with the privileges of
-- orisun's role (the one that runs the migrations and owns the tables),
-- so an application needs no privilege on orisun's tables, only EXECUTE
-- on those two (and their overloads for text and jsonb arguments), which
-- the application role of this installation holds: GRANT it TO the
-- application's role. That role is this database's own,
-- orisun_app_<database> (orisun_app_<database>_<schema> when orisun's
-- schema is not public; orisun_app_<md5 of those> when the name would be
-- over 63 bytes), named by orisun_app_role(): roles belong to the whole
-- server and CONNECT is granted to PUBLIC by default, so one role shared
-- by every database would let an application allowed one orisun log
-- append to every other on the server. Every orisun_ function is revoked
-- from PUBLIC (the mover, orisun_move_staged, and the helpers are
-- orisun's alone), and the functions that read or write orisun's tables
-- have their search_path pinned to orisun's schema and pg_temp last, so
-- that neither a temporary table nor another schema of the caller's can
-- stand in for orisun's.
--
-- orisun_secure does that for the functions of one migration: pin sets the
-- search_path of those, app are granted to the application role, which
-- also gets USAGE on orisun's schema (needed when it is not public). It
-- creates the role (NOLOGIN) when there is none; when orisun's role may not
-- create roles it warns and goes on, and the node says at every start
-- what an administrator runs (backend/postgres, checkAppRole). Each
-- migration that adds a function calls it.

-- orisun_app_role is the name of this installation's application role,
-- fixed when this migration runs (a database renamed later keeps it).
DO $do$
DECLARE
    r text := 'orisun_app_' || current_database()
        || CASE WHEN current_schema() = 'public' THEN '' ELSE '_' || current_schema() END;
BEGIN
    IF octet_length(r) > 63 THEN
        r := 'orisun_app_' || md5(current_database() || '.' || current_schema());
    END IF;
    EXECUTE format('CREATE FUNCTION orisun_app_role() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        format('SELECT %L::text', r));
END
$do$;

CREATE FUNCTION orisun_secure(pin regprocedure[], app regprocedure[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    f regprocedure;
    r text := orisun_app_role();
BEGIN
    FOREACH f IN ARRAY pin LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proname LIKE 'orisun\_%' LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
    IF to_regrole(quote_ident(r)) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE WARNING USING MESSAGE = format('role %s may not create roles, so the role %s does not exist: '
                    'the application cannot call orisun_append or orisun_enqueue until an administrator creates it '
                    '(docs/outbox.md "Privileges")', current_user, quote_ident(r));
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by another migration
        END;
    END IF;
    IF to_regrole(quote_ident(r)) IS NOT NULL THEN
        FOREACH f IN ARRAY app LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, r);
        END LOOP;
        -- Without USAGE on orisun's schema the role can neither name the
        -- functions nor find them on its search_path (public has it for
        -- PUBLIC by default).
        IF NOT has_schema_privilege(r, current_schema(), 'USAGE') THEN
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), r);
        END IF;
    END IF;
END
$$;

-- The append limits every node enforces, recorded by the nodes at start
-- (one row): the functions read them, so that an append through SQL is
-- refused exactly when the API would refuse it. A node whose configured
-- limits are below the row's is refused at start, naming both; an operator
-- lowers the row first and raises it last (docs/outbox.md "Changing the
-- limits"), and the mover sets aside a staged event over a lowered
-- max_event_bytes (0005).
CREATE TABLE orisun_append_limits (
    singleton         boolean     NOT NULL DEFAULT true,
    max_append_events integer     NOT NULL,
    max_append_bytes  integer     NOT NULL,
    max_event_bytes   integer     NOT NULL,
    recorded_by       text        NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orisun_append_limits_pkey PRIMARY KEY (singleton),
    CONSTRAINT orisun_append_limits_singleton_check CHECK (singleton),
    CONSTRAINT orisun_append_limits_positive_check
        CHECK (max_append_events > 0 AND max_append_bytes > 0 AND max_event_bytes > 0)
);

-- orisun_uuidv7 returns a time-ordered UUIDv7 (docs/design.md §3): the
-- server's uuidv7() where it has one (PostgreSQL 18), else a random UUID
-- whose first 48 bits are the Unix time in milliseconds and whose version
-- nibble is 7 (setting bits 52 and 53 turns version 4, 0100, into 0111).
-- The helpers that orisun_prepare_events calls are PL/pgSQL, not SQL
-- functions: a SQL function called from PL/pgSQL that the planner does not
-- inline is parsed and planned again in every transaction (a third of the
-- validation's CPU was that), where PL/pgSQL keeps its plans for the
-- session.
DO $do$
BEGIN
    IF to_regprocedure('pg_catalog.uuidv7()') IS NOT NULL THEN
        EXECUTE $f$CREATE FUNCTION orisun_uuidv7() RETURNS uuid
            LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS 'BEGIN RETURN pg_catalog.uuidv7(); END'$f$;
    ELSE
        EXECUTE $f$CREATE FUNCTION orisun_uuidv7() RETURNS uuid
            LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $b$
            BEGIN
            RETURN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;
            END
            $b$$f$;
    END IF;
END
$do$;

-- orisun_json_compact removes the insignificant white space of a JSON text,
-- as Go's json.Compact does for the API (event.Prepare): what is stored is
-- the same bytes whichever way an event came, so an idempotent retry
-- compares equal across both paths. Strings are kept whole (the first
-- alternative matches a string, which replaces itself); white space
-- outside strings is dropped. The text must be valid JSON (json input).
-- White space outside strings always borders a structural character
-- ({ } [ ] : ,) or an end of the text, since two values are never
-- adjacent: a text with no white space there is compact already, and is
-- returned without the replacement, whose capture group made it four times
-- slower on a compact 1 KB value (white space inside a string next to a
-- comma only sends the text the slow way).
CREATE FUNCTION orisun_json_compact(j json) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    t text := j::text;
BEGIN
    IF t !~ '[ \t\n\r][][{}:,]|[][{}:,][ \t\n\r]|^[ \t\n\r]|[ \t\n\r]$' THEN
        RETURN t;
    END IF;
    RETURN regexp_replace(t, '("(?:[^"\\]|\\.)*")|[ \t\n\r]+', '\1', 'g');
END
$$;

-- orisun_json_same is event.sameJSON for the idempotency of retries: two
-- compact JSON texts (or two NULLs) are the same event's when they are
-- the same bytes, or the same bytes once both are HTML-escaped as Go's
-- json.HTMLEscape does ('<', '>', '&', U+2028, U+2029 written as \u003c,
-- \u003e, \u0026, \u2028, \u2029). json.Marshal writes those escapes
-- and package client does not, so the same event can reach the log
-- either way; a retry through the other path is the same event, not a
-- conflict. Only raw characters are escaped, so an escaped backslash
-- followed by "u003c" is never taken for '<'.
CREATE FUNCTION orisun_json_same(a text, b text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT a IS NOT DISTINCT FROM b OR coalesce(
        replace(replace(replace(replace(replace(a, '&', E'\\u0026'), '<', E'\\u003c'), '>', E'\\u003e'),
            U&'\2028', E'\\u2028'), U&'\2029', E'\\u2029')
        = replace(replace(replace(replace(replace(b, '&', E'\\u0026'), '<', E'\\u003c'), '>', E'\\u003e'),
            U&'\2028', E'\\u2028'), U&'\2029', E'\\u2029'), false)
$$;

-- orisun_json_string_len is the length in bytes of s encoded as a JSON
-- string by Go's encoding/json (stream.EncodedSize): the quotes, two bytes
-- for '"', '\', and the short escapes, six for other control characters,
-- '<', '>', '&' (HTML-safe escapes) and U+2028/U+2029.
CREATE FUNCTION orisun_json_string_len(s text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN octet_length(s) + 2
        + (length(s) - length(translate(s, E'"\\\b\f\n\r\t', '')))
        + 5 * (length(s) - length(translate(s, '<>&', '')))
        + 5 * (length(s) - length(regexp_replace(s, '[\x01-\x07\x0b\x0e-\x1f]', '', 'g')))
        + 3 * (length(s) - length(translate(s, U&'\2028\2029', '')));
END
$$;

-- orisun_encoded_size is stream.EncodedSize: an upper bound of the size of
-- the stream message an event becomes (headers and body, the widest
-- position and time), for an event whose id, boundary and type are valid.
-- A test holds the two to the same value.
CREATE FUNCTION orisun_encoded_size(boundary text, id text, type text, tags text[], data text, metadata text)
RETURNS integer LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    -- the tags: each a JSON string, with a comma between two (a loop, not
    -- a subquery: an expression without one is evaluated without the
    -- executor's start-up)
    tl integer := 0;
    t text;
BEGIN
    FOREACH t IN ARRAY coalesce(tags, '{}') LOOP
        tl := tl + orisun_json_string_len(t) + 1;
    END LOOP;
    tl := greatest(tl - 1, 0);
    RETURN
        -- body: {"id":…,"boundary":…,"epoch":"…","position":…,"type":…,
        -- "time":"…","tags":[…],"data":…,"metadata":…}
        -- (id, boundary and type are validated before: no byte of them
        -- needs an escape, so each is its length and two quotes)
        6 + octet_length(id) + 2 + 12 + octet_length(boundary) + 2 + 9 + 36 + 2
        + 12 + 20 + 8 + octet_length(type) + 2 + 9 + 30 + 10 + 9
        + octet_length(data) + 12 + coalesce(octet_length(metadata), 4) + 1
        + tl
        -- subject orisun.events.<boundary>.<type>
        + 13 + 1 + octet_length(boundary) + 1 + octet_length(type)
        -- headers Orisun-Event-Id, -Position, -Epoch, -Type, -Time,
        -- Nats-Msg-Id ("Key: value\r\n"), the NATS/1.0 line,
        -- Nats-Expected-Last-Sequence and the terminator
        + 15 + octet_length(id) + 4 + 15 + 20 + 4 + 12 + 36 + 4
        + 11 + octet_length(type) + 4 + 11 + 30 + 4 + 11 + octet_length(id) + 4
        + 10 + 27 + 20 + 4 + 2;
END
$$;

-- orisun_raise raises a caller's error of class OR with the API's code
-- name as its hint.
CREATE FUNCTION orisun_raise(code text, message text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message,
        HINT = CASE code WHEN 'ORINV' THEN 'invalid' WHEN 'ORBIG' THEN 'too_large' WHEN 'ORNFD' THEN 'not_found'
                         WHEN 'ORCFL' THEN 'conflict' ELSE 'unavailable' END;
END
$$;

-- orisun_check_type is event.ValidateType: dot-separated tokens of letters,
-- digits, '_', '-' and ':', at most 255 bytes. where names the field.
CREATE FUNCTION orisun_check_type(t text, field text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF t IS NULL OR t = '' THEN
        PERFORM orisun_raise('ORINV', field || ': type is empty');
    ELSIF octet_length(t) > 255 THEN
        PERFORM orisun_raise('ORINV', format('%s: type is %s bytes long, the limit is 255', field, octet_length(t)));
    ELSIF t !~ '^[A-Za-z0-9_:-]+(\.[A-Za-z0-9_:-]+)*$' THEN
        PERFORM orisun_raise('ORINV', format('%s: type %s is not allowed; use letters, digits, ''_'', ''-'', '':'' and ''.'' between tokens',
            field, to_json(t)));
    END IF;
END
$$;

-- orisun_check_tag is event.ValidateTag (a text cannot hold a NUL byte:
-- the JSON escape \u0000 fails where the tag is read, see
-- orisun_prepare_events).
CREATE FUNCTION orisun_check_tag(tag text, field text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF tag = '' THEN
        PERFORM orisun_raise('ORINV', field || ': tag is empty');
    ELSIF octet_length(tag) > 255 THEN
        PERFORM orisun_raise('ORINV', format('%s: tag is %s bytes long, the limit is 255', field, octet_length(tag)));
    END IF;
END
$$;

-- orisun_strings reads a JSON array of strings (a query item's types or
-- tags, an event's tags): NULL or JSON null is the empty array; anything
-- else is refused, naming field.
CREATE FUNCTION orisun_strings(j json, field text, lim integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    out text[] := '{}';
    k integer;
BEGIN
    IF j IS NULL OR json_typeof(j) = 'null' THEN
        RETURN out;
    END IF;
    IF json_typeof(j) <> 'array' THEN
        PERFORM orisun_raise('ORINV', format('%s: a JSON %s cannot be a list of strings', field, json_typeof(j)));
    END IF;
    IF json_array_length(j) > lim THEN
        PERFORM orisun_raise('ORBIG', format('%s: %s entries, the limit is %s', field, json_array_length(j), lim));
    END IF;
    FOR k IN 0 .. json_array_length(j) - 1 LOOP
        IF json_typeof(j -> k) <> 'string' THEN
            PERFORM orisun_raise('ORINV', format('%s[%s]: a JSON %s cannot be a string', field, k, json_typeof(j -> k)));
        END IF;
        -- No NUL here: orisun_prepare_events refuses \u0000 before (and an
        -- exception block would cost a subtransaction per call).
        out := out || (j ->> k);
    END LOOP;
    RETURN out;
END
$$;

-- orisun_check_keys refuses a key of object j that is not one of allowed,
-- or one given twice, as the API's decoder does.
CREATE FUNCTION orisun_check_keys(j json, allowed text[], field text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k text;
BEGIN
    SELECT key INTO k FROM json_object_keys(j) key WHERE key <> ALL (allowed) LIMIT 1;
    IF FOUND THEN
        PERFORM orisun_raise('ORINV', format('%s: unknown field %s; the fields are %s', field, to_json(k), array_to_string(allowed, ', ')));
    END IF;
    SELECT key INTO k FROM json_object_keys(j) key GROUP BY key HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        PERFORM orisun_raise('ORINV', format('duplicate key %s in %s', to_json(k), field));
    END IF;
END
$$;

-- orisun_check_surrogates refuses a JSON text that holds a lone UTF-16
-- surrogate escape (\ud800 not followed by a low surrogate, or \udc00 not
-- after a high one): PostgreSQL's JSON functions cannot read such a string
-- into text and fail with a message naming no event (22P02). The API
-- accepts it (Go's decoder reads it as U+FFFD), so it is refused here by
-- name, class OR, naming field and, for an object, the key that holds it
-- (found on a copy whose lone surrogates are replaced by a marker the
-- JSON functions can read). Only called when a cheaper match has found a
-- surrogate escape at all.
CREATE FUNCTION orisun_check_surrogates(j json, field text, fn text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- A \u escape (after an even number of backslashes) of a high
    -- surrogate with no low one after it, or of a low one with no high one
    -- before it.
    re constant text := '(?<!(?:^|[^\\])(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2})(?<=(?:^|[^\\])(?:\\\\)*)\\u(?:[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})|[dD][c-fC-F][0-9a-fA-F]{2})';
    m text := substring(j::text FROM re);
    kv record;
    at text := '';
BEGIN
    IF m IS NULL THEN
        RETURN;
    END IF;
    IF json_typeof(j) = 'object' THEN
        FOR kv IN SELECT key, value::text AS v FROM json_each(regexp_replace(j::text, re, '\\uFfFf', 'g')::json) LOOP
            IF strpos(kv.v, '\uFfFf') > 0 THEN
                at := '.' || kv.key;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    PERFORM orisun_raise('ORINV', format('%s%s: a JSON string holds %s, a lone UTF-16 surrogate, which %s cannot read '
        '(PostgreSQL''s JSON functions refuse it; the API reads it as U+FFFD): send the character, or \ufffd, '
        'or append the event through the API', field, at, m, fn));
END
$$;

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
    -- Each event's fields as the first pass read them (index i + 1): the
    -- second pass reads these instead of parsing the array again.
    aid json[];
    atype json[];
    adata json[];
    amd json[];
    atags json[];
    sur boolean;
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
    -- A lone surrogate escape: refused by name below (the cheap match
    -- finds every surrogate escape, pairs too).
    sur := events::text ~ '\\u[dD][89a-fA-F]';
    -- The API decodes the whole request before it checks any limit, so
    -- what its decoding refuses (an event that is no object, an unknown
    -- field, a field of the wrong JSON type, a key given twice) is judged
    -- first, for every event: the same request gets the same kind of
    -- error from both.
    aid := array_fill(NULL::json, ARRAY[n]);
    atype := aid; adata := aid; amd := aid; atags := aid;
    i := -1;
    FOR e IN SELECT json_array_elements(events) LOOP
        i := i + 1;
        f := format('events[%s]', i);
        IF sur THEN
            PERFORM orisun_check_surrogates(e, f, fn);
        END IF;
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
            CASE kv.key
                WHEN 'id' THEN aid[i + 1] := kv.value;
                WHEN 'type' THEN atype[i + 1] := kv.value;
                WHEN 'data' THEN adata[i + 1] := kv.value;
                WHEN 'metadata' THEN amd[i + 1] := kv.value;
                ELSE
                    atags[i + 1] := kv.value;
                    PERFORM orisun_strings(kv.value, f || ': tags', 2147483647);
            END CASE;
        END LOOP;
    END LOOP;
    SELECT * INTO lim FROM orisun_append_limits;
    IF NOT FOUND THEN
        PERFORM orisun_raise('ORUNV', 'no orisun node has recorded its append limits in orisun_append_limits yet; start orisun on this database once');
    END IF;
    IF n > lim.max_append_events THEN
        PERFORM orisun_raise('ORBIG', format('events: the append holds %s events, the limit is %s', n, lim.max_append_events));
    END IF;
    -- The events' fields as the pass above read them (the exact text of
    -- each; it refused what is no object, and unknown and repeated keys):
    -- events -> i would parse the whole array text again for every event
    -- (64 events of 1 KB took 22 ms), and a second json_each per event
    -- costs a query's start-up each.
    FOR i IN 0 .. n - 1 LOOP
        f := format('events[%s]', i);
        vid := aid[i + 1]; vtype := atype[i + 1]; vdata := adata[i + 1]; vmd := amd[i + 1]; vtags := atags[i + 1];
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
        total := total + 36 + octet_length(ty) + octet_length(d) + coalesce(octet_length(md), 0);
        FOR j IN 1 .. coalesce(array_length(tags, 1), 0) LOOP
            total := total + octet_length(tags[j]) + 3;
        END LOOP;
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

-- orisun_append: validation (orisun_prepare_events), then the head row,
-- idempotency by id, the condition and the append, as said at the top.
CREATE FUNCTION orisun_append(boundary text, events json, condition json DEFAULT NULL)
RETURNS TABLE (epoch uuid, first_position bigint, last_position bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
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
        IF condition::text ~ '\\u[dD][89a-fA-F]' THEN
            PERFORM orisun_check_surrogates(condition, 'condition', 'orisun_append');
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

    -- The caller's commit must be durable before the relay can read and
    -- publish these events: with synchronous_commit off, the commit is
    -- visible (and the NOTIFY delivered) before its WAL is flushed, and a
    -- crash of the server then would take back events already published
    -- (I2, I5). 'local' waits for the local flush only, and is set only
    -- over 'off', so that a stronger setting (remote_apply, …) stays. It
    -- lasts to the end of the caller's transaction (docs/outbox.md,
    -- "synchronous_commit").
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
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
            IF st.type <> types[i] OR NOT orisun_json_same(st.data, datas[i]) OR NOT orisun_json_same(st.metadata, mds[i]) OR st.tags::text <> tagl[i] THEN
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
    -- Delivered at the commit, and only if the caller commits. A session
    -- that set orisun.notify to off sends none (a transaction that will be
    -- prepared for two-phase commit cannot have notified): the node's head
    -- check finds the events within ORISUN_POLL_INTERVAL (docs/outbox.md,
    -- "Two-phase commit").
    IF coalesce(current_setting('orisun.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('orisun_events', b);
    END IF;
    RETURN QUERY SELECT ep, h + 1, h + n;
END
$fn$;

-- orisun_append for drivers that bind the JSON arguments as text (JDBC's
-- setString, Npgsql's string, psycopg's str with a type) or as jsonb
-- (psycopg's Jsonb): PostgreSQL has no implicit cast from either to json,
-- so without these such a call fails with "function orisun_append(text,
-- text) does not exist". They cast and call the json one (text that is
-- not JSON fails the cast, 22P02). A literal without a type ('[…]' in
-- psql) resolves to the text one. jsonb has lost the request's key order,
-- white space and duplicate keys: an event sent so is stored as jsonb
-- writes it, and a retry must be sent the same way to be recognised.
CREATE FUNCTION orisun_append(boundary text, events text, condition text DEFAULT NULL)
RETURNS TABLE (epoch uuid, first_position bigint, last_position bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM orisun_append(boundary, events::json, condition::json)
$$;
CREATE FUNCTION orisun_append(boundary text, events jsonb, condition jsonb DEFAULT NULL)
RETURNS TABLE (epoch uuid, first_position bigint, last_position bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM orisun_append(boundary, events::json, condition::json)
$$;

SELECT orisun_secure(
    ARRAY['orisun_prepare_events(text, json, text)', 'orisun_append(text, json, json)',
          'orisun_append(text, text, text)', 'orisun_append(text, jsonb, jsonb)']::regprocedure[],
    ARRAY['orisun_append(text, json, json)', 'orisun_append(text, text, text)',
          'orisun_append(text, jsonb, jsonb)']::regprocedure[]);
