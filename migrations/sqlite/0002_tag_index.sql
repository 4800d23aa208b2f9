-- 0002: an index of events by tag, for queries and conditions (docs/design.md §4).
--
-- Tags are a JSON array in events.tags; a query item's tag test through
-- json_each reads every event of the boundary after the position. This
-- table holds one row per (boundary, tag, position), so a tag query reads
-- only the positions carrying the tag, in position order, forwards (read)
-- or backwards (read-latest). The trigger fills it in the inserting
-- transaction, so it is exactly as committed as the events (events are
-- never updated or deleted). OR IGNORE: an event may carry a tag twice.
CREATE TABLE event_tags (
    boundary TEXT    NOT NULL,
    tag      TEXT    NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (boundary, tag, position)
) WITHOUT ROWID;

INSERT OR IGNORE INTO event_tags (boundary, tag, position)
SELECT e.boundary, t.value, e.position FROM events e, json_each(e.tags) t;

CREATE TRIGGER events_tag_index AFTER INSERT ON events
BEGIN
    INSERT OR IGNORE INTO event_tags (boundary, tag, position)
    SELECT NEW.boundary, value, NEW.position FROM json_each(NEW.tags);
END;
