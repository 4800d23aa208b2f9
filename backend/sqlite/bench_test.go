package sqlite

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend/backendtest"
)

// BenchmarkAppend reports append throughput: single-event appends from many
// goroutines (what group commit is for) and sequential 100-event batches,
// at two synchronous levels. Reporting only: no assertion on time.
func BenchmarkAppend(b *testing.B) {
	// raw_insert is the reference the append path is measured against:
	// the same rows, 100 per multi-row INSERT and one transaction each
	// (sync FULL), into a copy of the events table with the same keys,
	// indexes and tag-index trigger, with no head row, no group commit, no
	// id lookup and no condition.
	b.Run("raw_insert", func(b *testing.B) {
		s := setup(b, Config{})
		ctx := context.Background()
		for _, q := range []string{
			`CREATE TABLE raw_events (boundary TEXT NOT NULL, position INTEGER NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL,
    time INTEGER NOT NULL, tags TEXT NOT NULL, data TEXT NOT NULL, metadata TEXT, PRIMARY KEY (boundary, position)) WITHOUT ROWID`,
			`CREATE UNIQUE INDEX raw_events_boundary_id ON raw_events (boundary, id)`,
			`CREATE INDEX raw_events_boundary_type_position ON raw_events (boundary, type, position)`,
			`CREATE TABLE raw_event_tags (boundary TEXT NOT NULL, tag TEXT NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (boundary, tag, position)) WITHOUT ROWID`,
			`CREATE TRIGGER raw_events_tag_index AFTER INSERT ON raw_events BEGIN
    INSERT OR IGNORE INTO raw_event_tags (boundary, tag, position) SELECT NEW.boundary, value, NEW.position FROM json_each(NEW.tags);
END`,
		} {
			if _, err := s.wdb.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		stmt := "INSERT INTO raw_events (boundary, position, id, type, time, tags, data, metadata) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", 100), ", ")
		b.ResetTimer()
		for i := 0; i < b.N; i += 100 {
			in := backendtest.BenchEvents(100, "customer:42")
			args := make([]any, 0, 800)
			now := time.Now().UnixNano()
			for k := range in {
				args = append(args, "bench", int64(i+k+1), in[k].ID, in[k].Type, now, `["customer:42"]`, string(in[k].Data), nil)
			}
			if _, err := s.wdb.ExecContext(ctx, stmt, args...); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("single_parallel/sync="+sync, func(b *testing.B) {
			s := setup(b, Config{Synchronous: sync})
			backendtest.Create(b, s, "bench")
			backendtest.BenchParallel(b, s, []string{"bench"}, s.groups.Load)
		})
		b.Run("batch100/sync="+sync, func(b *testing.B) {
			s := setup(b, Config{Synchronous: sync})
			backendtest.Create(b, s, "bench")
			b.ResetTimer()
			for range b.N {
				if _, err := s.Append(context.Background(), "bench", backendtest.BenchEvents(100, "customer:42"), nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendCallers: single-event appends from a fixed number of
// callers to one boundary (sync FULL), beside 100-event batches from one
// caller, so the two compare in one run. b.N is events in both.
func BenchmarkAppendCallers(b *testing.B) {
	for _, callers := range []int{1, 16, 64, 256} {
		b.Run("single/callers="+strconv.Itoa(callers), func(b *testing.B) {
			s := setup(b, Config{GroupDelay: 200 * time.Microsecond})
			backendtest.Create(b, s, "bench")
			groups := s.groups.Load()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := s.Append(context.Background(), "bench", backendtest.BenchEvents(1, "customer:42"), nil); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			if n := s.groups.Load() - groups; n > 0 {
				b.ReportMetric(float64(b.N)/float64(n), "events/commit")
			}
		})
	}
	b.Run("batch100", func(b *testing.B) {
		s := setup(b, Config{GroupDelay: 200 * time.Microsecond})
		backendtest.Create(b, s, "bench")
		b.ResetTimer()
		for i := 0; i < b.N; i += 100 {
			if _, err := s.Append(context.Background(), "bench", backendtest.BenchEvents(100, "customer:42"), nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkAppendMatrix: the shared append matrix (1/16/64/256 callers,
// with and without a condition, 100-event batches; group commit on and
// off). Compare with BenchmarkAppend/raw_insert in the same run.
func BenchmarkAppendMatrix(b *testing.B) {
	backendtest.BenchAppend(b, openGroups)
}

// BenchmarkRead reports the read path (backendtest.BenchRead): pages of
// 1,000 events of about 1 KB.
func BenchmarkRead(b *testing.B) {
	backendtest.BenchRead(b, setup(b, Config{}))
}
