package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orisun-io/orisun/backend/backendtest"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// BenchmarkAppend reports append throughput against the PostgreSQL server
// of ORISUN_TEST_PG_URL (scripts/test starts one): single-event appends from
// many goroutines to one boundary (what group commit is for), the same
// spread over 8 boundaries (groups of different boundaries commit side by
// side), and sequential 100-event batches. Reporting only: no assertion on
// time.
func BenchmarkAppend(b *testing.B) {
	b.Run("single_parallel", func(b *testing.B) {
		s := setup(b, Config{})
		backendtest.Create(b, s, "bench")
		backendtest.BenchParallel(b, s, []string{"bench"}, s.groups.Load)
	})
	b.Run("single_parallel_8_boundaries", func(b *testing.B) {
		s := setup(b, Config{})
		names := make([]string, 8)
		for i := range names {
			names[i] = "bench_" + strconv.Itoa(i)
			backendtest.Create(b, s, names[i])
		}
		backendtest.BenchParallel(b, s, names, s.groups.Load)
	})
	b.Run("single_64_callers/statement_per_request/delay=0s", func(b *testing.B) {
		benchSingle(b, Config{}, 64, true)
	})
	for _, delay := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond} {
		b.Run("single_64_callers/merged/delay="+delay.String(), func(b *testing.B) {
			benchSingle(b, Config{GroupDelay: delay}, 64, false)
		})
	}
	b.Run("single_1_caller/delay=1ms", func(b *testing.B) {
		benchSingle(b, Config{GroupDelay: time.Millisecond}, 1, false)
	})
	// raw_insert_8_conns is the reference the append path is measured
	// against: the same rows (100 per statement) inserted by 8 connections
	// into a copy of the events table (same columns, keys and indexes), as
	// plain multi-row INSERTs in autocommit, with no head row, no group
	// commit and no condition.
	b.Run("raw_insert_8_conns", func(b *testing.B) {
		s := setup(b, Config{})
		ctx := context.Background()
		if _, err := s.pool.Exec(ctx, `CREATE TABLE raw_events (LIKE orisun_events INCLUDING ALL)`); err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.ResetTimer()
		runCallers(b, 8, func() error {
			in := backendtest.BenchEvents(100, "customer:42")
			first := next.Add(100) - 99
			// Sent as the append statement sends them (see eventColumns).
			ids := make([]pgtype.UUID, len(in))
			tags := make([][]string, len(in))
			data := make([]string, len(in))
			for i := range in {
				ids[i], tags[i], data[i] = pgtype.UUID{Bytes: uuid.MustParse(in[i].ID), Valid: true}, in[i].Tags, string(in[i].Data)
			}
			_, err := s.pool.Exec(ctx, `INSERT INTO raw_events (boundary, position, id, type, time, tags, data, metadata)
SELECT 'bench', $1::bigint + u.ord - 1, u.id, 'bench.event', statement_timestamp(), ARRAY[u.tag], u.data::json, NULL
FROM unnest($2::uuid[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, tag, data, ord)`,
				first, ids, firstTags(tags), data)
			return err
		}, 100)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("batch100", func(b *testing.B) {
		s := setup(b, Config{})
		backendtest.Create(b, s, "bench")
		b.ResetTimer()
		// b.N is events, as in the other cases: b.N/100 batches.
		runCallers(b, 1, func() error {
			_, err := s.Append(context.Background(), "bench", backendtest.BenchEvents(100, "customer:42"), nil)
			return err
		}, 100)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// runCallers runs do from callers goroutines until b.N events are done,
// each call doing per events (default 1).
func runCallers(b *testing.B, callers int, do func() error, per ...int) {
	step := int64(1)
	if len(per) > 0 {
		step = int64(per[0])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(step) <= int64(b.N)+step-1 {
				if err := do(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func firstTags(tags [][]string) []string {
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = t[0]
	}
	return out
}

// benchSingle: single-event appends from callers goroutines to one
// boundary; perRequest appends each request with a statement of its own
// instead of merging the requests of a group.
func benchSingle(b *testing.B, cfg Config, callers int, perRequest bool) {
	s := setup(b, cfg)
	s.perRequest = perRequest
	backendtest.Create(b, s, "bench")
	groups := s.groups.Load()
	b.ResetTimer()
	runCallers(b, callers, func() error {
		_, err := s.Append(context.Background(), "bench", backendtest.BenchEvents(1, "customer:42"), nil)
		return err
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if n := s.groups.Load() - groups; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "events/commit")
	}
}

// BenchmarkAppendMatrix: the shared append matrix (1/16/64/256 callers,
// with and without a condition, 100-event batches; group commit on and
// off). Compare with BenchmarkAppend/raw_insert_8_conns in the same run.
func BenchmarkAppendMatrix(b *testing.B) {
	backendtest.BenchAppend(b, openGroups)
}

// BenchmarkAppendLarge: one large append with many tags, the size the
// limits allow (ORISUN_MAX_APPEND_EVENTS 10,000; 64 tags an event). The
// append statement's work must grow with the tags, not with their square
// (a slice of one flat array of all the tags took 17 s for 10,000 events
// of 64 tags; the array literal per event, 2.5 s). Reporting only.
func BenchmarkAppendLarge(b *testing.B) {
	for _, c := range []struct{ events, tags int }{{1000, 5}, {10000, 5}, {10000, 64}} {
		b.Run(strconv.Itoa(c.events)+"x"+strconv.Itoa(c.tags)+"_tags", func(b *testing.B) {
			s := setup(b, Config{})
			backendtest.Create(b, s, "big")
			inputs := func() []event.Input {
				in := make([]event.Input, c.events)
				for i := range in {
					tags := make([]string, c.tags)
					for k := range tags {
						tags[k] = "tag:" + strconv.Itoa(i) + ":" + strconv.Itoa(k)
					}
					in[i] = event.Input{ID: event.NewID(), Type: "bench.event", Data: json.RawMessage(`{}`), Tags: tags}
				}
				return in
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				in := inputs()
				b.StartTimer()
				if _, err := s.Append(context.Background(), "big", in, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*c.events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRead reports the read path (backendtest.BenchRead): pages of
// 1,000 events of about 1 KB.
func BenchmarkRead(b *testing.B) {
	backendtest.BenchRead(b, setup(b, Config{}))
}

// BenchmarkReadNearHead reports what the relay's read after each group
// costs: a page of the last 30 events of a boundary of 20,000 of about
// 1 KB, from one connection, with the pool's plan mode (auto) and with
// every run planned (force_custom_plan, set in the URL, as before the mode
// changed), each on a table without statistics (a fresh one, as the
// bench's) and after ANALYZE (as autovacuum leaves a table in service).
// Under auto PostgreSQL takes the read's generic plan in the first case
// and keeps planning it in the second. server-µs/op is the CPU time of
// the connection's backend, the planning included (Linux, a server on
// this machine and in this PID namespace, 100 ticks a second; left out
// where /proc does not show it).
func BenchmarkReadNearHead(b *testing.B) {
	for _, analyzed := range []bool{false, true} {
		for _, mode := range []string{"auto", "force_custom_plan"} {
			b.Run(fmt.Sprintf("plan_cache_mode=%s/analyzed=%v", mode, analyzed), func(b *testing.B) {
				url, sep := pgtest.URL(b), "?"
				if strings.Contains(url, "?") {
					sep = "&"
				}
				s := setup(b, Config{URL: url + sep + "plan_cache_mode=" + mode, MaxConns: 1})
				const n = 20000
				backendtest.Create(b, s, "big")
				backendtest.Fill(b, s, "big", n, func(k int) event.Input {
					return backendtest.BenchEvents(1, fmt.Sprintf("customer:%d", k%64))[0]
				})
				ctx := context.Background()
				if analyzed {
					if _, err := s.pool.Exec(ctx, `ANALYZE orisun_events`); err != nil {
						b.Fatal(err)
					}
				}
				var pid int
				if err := s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					b.Fatal(err)
				}
				cpu0 := procCPU(pid)
				b.ResetTimer()
				for b.Loop() {
					if _, events, err := s.Read(ctx, "big", n-30, 1000, nil); err != nil || len(events) != 30 {
						b.Fatalf("read: %d events, %v", len(events), err)
					}
				}
				b.StopTimer()
				if cpu0 > 0 {
					b.ReportMetric(float64(procCPU(pid)-cpu0)/float64(b.N)/1e3, "server-µs/op")
				}
			})
		}
	}
}

// procCPU is the CPU time process pid has used (user and system), in
// nanoseconds, from /proc/<pid>/stat in ticks of 1/100 s; 0 where it
// cannot be read.
func procCPU(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields follow its ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (utime + stime) * 1e7
}
