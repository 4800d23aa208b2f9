package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/migrations"
)

// TestUpgradeFrom0001BackfillsTagIndex: a store made by an orisun that knew
// only migration 0001 already holds tagged events (written as 0001's schema
// has them: a JSON array in events.tags, no event_tags). Opened by this
// orisun, migration 0002 fills the tag index from them, so reads,
// read-latest and conditions by tag find them, and events appended after
// the upgrade are indexed by the trigger alongside.
func TestUpgradeFrom0001BackfillsTagIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ms, err := migrations.List(migrations.SQLite, migrations.SQLiteDir)
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Version != 1 {
		t.Fatalf("first migration is %d, want 1", ms[0].Version)
	}
	// The store as 0001 left it, built by hand: the migration, its
	// schema_migrations row, a boundary and three events.
	old, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{sqlCreateMigrationsTable, nil},
		{ms[0].SQL, nil},
		{sqlInsertMigrationRow, []any{1, now}},
		{`INSERT INTO boundaries (name, epoch, head, checkpoint, created_at) VALUES ('old', '6f1c1f7e-3f43-4a53-9b5c-3b2a3f6e9d10', 3, 0, ?)`, []any{now}},
		{`INSERT INTO events (boundary, position, id, type, time, tags, data, metadata) VALUES
			('old', 1, '0190b0a0-0000-7000-8000-000000000001', 'seat.booked', ?1, '["seat:1","show:1"]', '{}', NULL),
			('old', 2, '0190b0a0-0000-7000-8000-000000000002', 'seat.booked', ?1, '["seat:2","show:1","seat:2"]', '{}', NULL),
			('old', 3, '0190b0a0-0000-7000-8000-000000000003', 'note', ?1, '[]', '{}', NULL)`, []any{now}},
	} {
		if _, err := old.ExecContext(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}
	var tables int
	if err := old.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'event_tags'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("event_tags exists before the upgrade (%d, %v)", tables, err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := setup(t, Config{Dir: dir})
	var version int
	if err := s.rdb.QueryRowContext(ctx, sqlMaxMigration).Scan(&version); err != nil || version != ms[len(ms)-1].Version {
		t.Fatalf("schema version %d (%v) after open, want %d", version, err, ms[len(ms)-1].Version)
	}
	q := func(tags ...string) *event.Query { return &event.Query{Items: []event.QueryItem{{Tags: tags}}} }
	positions := func(events []event.Event) []uint64 {
		var ps []uint64
		for _, e := range events {
			ps = append(ps, e.Position)
		}
		return ps
	}
	for _, c := range []struct {
		q    *event.Query
		want []uint64
	}{
		{q("show:1"), []uint64{1, 2}},
		{q("seat:2"), []uint64{2}},
		{q("seat:2", "show:1"), []uint64{2}},
		{q("seat:1", "seat:2"), nil},
	} {
		_, got, err := s.Read(ctx, "old", 0, 100, c.q)
		if err != nil || !slices.Equal(positions(got), c.want) {
			t.Fatalf("read by %+v: %v, %v; want positions %v", c.q, positions(got), err, c.want)
		}
	}
	l, err := s.Latest(ctx, "old", q("show:1"))
	if err != nil || l.Event == nil || l.Event.Position != 2 || l.Head != 3 {
		t.Fatalf("latest of show:1 after the upgrade: %+v, %v; want position 2", l, err)
	}
	cond := &event.Condition{Query: *q("seat:1"), After: 0}
	in, err := event.Prepare("old", []event.Input{{Type: "seat.booked", Data: []byte(`{}`), Tags: []string{"seat:1", "show:1"}}}, event.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, "old", in, cond)
	var ce *event.ConflictError
	if !errors.As(err, &ce) || ce.Position != 1 {
		t.Fatalf("condition on an event stored before the upgrade: %v, want a conflict at position 1", err)
	}
	// Appended after the upgrade: indexed by the trigger, found with the
	// backfilled ones.
	cond.After = 3
	if res, err := s.Append(ctx, "old", in, cond); err != nil || res.First != 4 {
		t.Fatalf("append after the upgrade: %+v, %v", res, err)
	}
	_, got, err := s.Read(ctx, "old", 0, 100, q("show:1"))
	if err != nil || len(got) != 3 || got[2].Position != 4 {
		t.Fatalf("read of show:1 across the upgrade: %v, %v; want 1, 2, 4", positions(got), err)
	}
}
