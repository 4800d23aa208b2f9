package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/orisun-io/orisun/event"
)

// BenchmarkQueryShapes reports the time of a read page, a read-latest and a
// condition check on a 300,000-event boundary for the query shapes whose
// plans matter: a tag every event carries, a tag of 100 events, a type of
// every other event, a type of 30 events, a two-tag item (both orders) and
// two items. Reporting only: no assertion on time (docs/queries.md has the
// numbers). Run it with
//
//	ORISUN_TEST_RACE=0 scripts/test -run '^$' -bench BenchmarkQueryShapes -benchtime 10x ./backend/sqlite/
func BenchmarkQueryShapes(b *testing.B) {
	s := setup(b, Config{Synchronous: "OFF"})
	ctx := context.Background()
	const n = 300000
	fillBig(b, s, n, 3000, `{"n":1}`, func(k int) string {
		switch {
		case k%10000 == 0:
			return "rare"
		case k%2 == 0:
			return "common"
		}
		return fmt.Sprintf("type.%d", k%1000)
	})
	item := func(types []string, tags ...string) event.QueryItem { return event.QueryItem{Types: types, Tags: tags} }
	for _, c := range []struct {
		name string
		q    event.Query
	}{
		{"common_tag", event.Query{Items: []event.QueryItem{item(nil, "all")}}},
		{"rare_tag", event.Query{Items: []event.QueryItem{item(nil, "customer:42")}}},
		{"common_type", event.Query{Items: []event.QueryItem{item([]string{"common"})}}},
		{"rare_type", event.Query{Items: []event.QueryItem{item([]string{"rare"})}}},
		{"two_tags_common_first", event.Query{Items: []event.QueryItem{item(nil, "all", "customer:42")}}},
		{"two_tags_rare_first", event.Query{Items: []event.QueryItem{item(nil, "customer:42", "all")}}},
		{"type_and_tag", event.Query{Items: []event.QueryItem{item([]string{"common"}, "customer:42")}}},
		{"two_items", event.Query{Items: []event.QueryItem{item(nil, "customer:42"), item([]string{"rare"})}}},
	} {
		b.Run(c.name+"/read_page_first", func(b *testing.B) {
			for range b.N {
				if _, _, err := s.Read(ctx, "big", 0, 100, &c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/read_page_middle", func(b *testing.B) {
			for range b.N {
				if _, _, err := s.Read(ctx, "big", n/2, 100, &c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/latest", func(b *testing.B) {
			for range b.N {
				if _, err := s.Latest(ctx, "big", &c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/condition_middle", func(b *testing.B) {
			cond := event.Condition{Query: c.q, After: n / 2}
			for range b.N {
				if _, _, err := firstMatch(ctx, s.rdb, "big", &cond); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/condition_near_head", func(b *testing.B) {
			cond := event.Condition{Query: c.q, After: n - 50}
			for range b.N {
				if _, _, err := firstMatch(ctx, s.rdb, "big", &cond); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The alternative that was measured and not chosen: a correlated
	// EXISTS per event, walking the primary key from the bound and testing
	// each event's tag by the tag index.
	const existsRead = `SELECT position, id, type, time, tags, data, metadata FROM events
WHERE boundary = ?1 AND position > ?2
  AND EXISTS (SELECT 1 FROM event_tags t WHERE t.boundary = ?1 AND t.tag = ?4 AND t.position = events.position)
ORDER BY position LIMIT ?3`
	const existsLatest = `SELECT position, id, type, time, tags, data, metadata FROM events
WHERE boundary = ?1 AND position <= ?2
  AND EXISTS (SELECT 1 FROM event_tags t WHERE t.boundary = ?1 AND t.tag = ?4 AND t.position = events.position)
ORDER BY position DESC LIMIT ?3`
	for _, tag := range []string{"all", "customer:42"} {
		for _, st := range []struct {
			name, sql string
			pos       int64
			limit     int
		}{
			{"read_page_first", existsRead, 0, 100},
			{"read_page_middle", existsRead, n / 2, 100},
			{"latest", existsLatest, n, 1},
			{"condition_middle", existsRead, n / 2, 1},
		} {
			b.Run("correlated_exists_"+tag+"/"+st.name, func(b *testing.B) {
				for range b.N {
					rows, err := s.rdb.QueryContext(ctx, st.sql, "big", st.pos, st.limit, tag)
					if err != nil {
						b.Fatal(err)
					}
					for rows.Next() {
					}
					if err := rows.Close(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
