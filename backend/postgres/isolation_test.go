package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/event"
)

// TestOutboxRepeatableReadAndSerializable_I1: application transactions at
// REPEATABLE READ and at SERIALIZABLE call orisun_append (half of the
// workers) and orisun_enqueue (the other half) for one event of an id of
// their own, each after a first statement that takes the snapshot, while
// Go appends and a mover run on the same boundary. What they get under
// contention (docs/outbox.md "Locks, timeouts and retries"): serialization
// failures (40001), counted and logged, after which the worker retries the
// whole transaction with the same id, as every 40001 asks; nothing else.
// The log ends dense (I1), with every event of a committed transaction
// once and nothing of an attempt that failed.
func TestOutboxRepeatableReadAndSerializable_I1(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			s, url, _, l := enqueueSetup(t)
			ctx := context.Background()
			const workers, rounds = 8, 6
			var failures [2]atomic.Int64 // 40001s of orisun_append, of orisun_enqueue
			var mu sync.Mutex
			committed := map[string]string{}
			var wg sync.WaitGroup
			errs := make(chan error, workers+2)
			for w := range workers {
				wg.Go(func() {
					conn, err := pgx.Connect(ctx, url)
					if err != nil {
						errs <- err
						return
					}
					defer conn.Close(ctx)
					fn := [2]string{"orisun_append", "orisun_enqueue"}[w%2]
					for r := range rounds {
						id := event.NewID()
						for attempt := 1; ; attempt++ {
							err := isolatedCall(ctx, conn, iso, fn, id, fmt.Sprintf("%d-%d", w, r))
							var pe *pgconn.PgError
							if errors.As(err, &pe) && pe.Code == "40001" {
								failures[w%2].Add(1)
								if attempt < 1000 {
									continue
								}
							}
							if err != nil {
								errs <- fmt.Errorf("%s under %s, attempt %d: %w", fn, iso, attempt, err)
								return
							}
							break
						}
						mu.Lock()
						committed[id] = fn
						mu.Unlock()
					}
				})
			}
			all := appendAndMove(t, s, l, errs)(wg.Wait)
			seen := map[string]bool{}
			for _, e := range all {
				if e.Type == "go" {
					continue
				}
				if committed[e.ID] == "" || seen[e.ID] {
					t.Fatalf("position %d holds %s (%s): not committed, or twice", e.Position, e.ID, e.Type)
				}
				seen[e.ID] = true
			}
			if len(seen) != workers*rounds {
				t.Fatalf("%d application events in the log, %d committed", len(seen), workers*rounds)
			}
			t.Logf("%s: %d transactions committed; serialization failures retried: orisun_append %d, orisun_enqueue %d; head %d",
				iso, workers*rounds, failures[0].Load(), failures[1].Load(), len(all))
		})
	}
}

// isolatedCall runs one application transaction at iso on conn: a first
// statement that takes the snapshot (a read of the boundary's head, as an
// application reads before it decides), then fn ("orisun_append" or
// "orisun_enqueue") for one event of id id, then the commit.
func isolatedCall(ctx context.Context, conn *pgx.Conn, iso pgx.TxIsoLevel, fn, id, data string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM orisun_events WHERE boundary = 'b' AND position > 0`); err != nil {
		return err
	}
	events := fmt.Sprintf(`[{"id":%q,"type":"app","data":%q}]`, id, data)
	if _, err := tx.Exec(ctx, `SELECT `+fn+`('b', $1::json)`, events); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
