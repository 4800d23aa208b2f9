// Command projection is an example of an effectively-once consumer: it
// projects a boundary's events into a table of counts per event type, in
// PostgreSQL or SQLite, with the checkpoint helper, which saves the
// consumer's (epoch, position) in the same transaction as the projection's
// writes. Kill it at any moment and start it again: every event is counted
// exactly once.
//
// It runs an orisun node in-process (SQLite store in -data) as its event
// source and, with -append, appends demo events first:
//
//	go run ./examples/projection -append 1000 -projection sqlite:projection.db
//	go run ./examples/projection -projection 'postgres://user:pass@localhost:5432/app'
//
// Against a running orisun, the source would be the Go NATS client instead
// of the node: anything with Subscribe(ctx, boundary, after, handler, opts)
// is a checkpoint.Subscriber.
//
// When the boundary's epoch changes (it was reset, or the store restored
// from a backup), Run ends with a *checkpoint.EpochError: empty the
// projection and reset the checkpoint together with Rebuild (here:
// -rebuild), then run again.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/checkpoint"
	"github.com/orisun-io/orisun/event"
)

func main() {
	data := flag.String("data", "./data", "orisun data directory (the event source)")
	target := flag.String("projection", "sqlite:projection.db", "where the projection lives: sqlite:<file> or a postgres:// URL")
	boundary := flag.String("boundary", "default", "boundary to project")
	appendN := flag.Int("append", 0, "append this many demo events first")
	rebuild := flag.Bool("rebuild", false, "empty the projection and reset its checkpoint first")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *data, *target, *boundary, *appendN, *rebuild); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("projection stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, data, target, boundary string, appendN int, rebuild bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	node, err := orisun.New(orisun.Config{DataDir: data, NATSPort: -1, Boundaries: []string{boundary}}, orisun.WithLogger(log))
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	defer node.Stop()
	if err := appendDemo(ctx, node, boundary, appendN); err != nil {
		return err
	}

	if strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://") {
		return runPostgres(ctx, log, node, target, boundary, rebuild)
	}
	file, ok := strings.CutPrefix(target, "sqlite:")
	if !ok {
		return fmt.Errorf("-projection %q: use sqlite:<file> or a postgres:// URL", target)
	}
	return runSQLite(ctx, log, node, file, boundary, rebuild)
}

func runPostgres(ctx context.Context, log *slog.Logger, src checkpoint.Subscriber, url, boundary string, rebuild bool) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("projection database: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS event_type_counts (type text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		return fmt.Errorf("projection table: %w", err)
	}
	cp, err := checkpoint.NewPG(pool, "example-type-counts", boundary)
	if err != nil {
		return err
	}
	return project(ctx, log, src, cp, rebuild, "PostgreSQL",
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM event_type_counts`)
			return err
		},
		func(ctx context.Context, tx pgx.Tx, e event.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO event_type_counts (type, n) VALUES ($1, 1)
			ON CONFLICT (type) DO UPDATE SET n = event_type_counts.n + 1`, e.Type)
			return err
		})
}

func runSQLite(ctx context.Context, log *slog.Logger, src checkpoint.Subscriber, file, boundary string, rebuild bool) error {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return fmt.Errorf("projection database: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS event_type_counts (type TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("projection table: %w", err)
	}
	cp, err := checkpoint.NewSQLite(db, "example-type-counts", boundary)
	if err != nil {
		return err
	}
	return project(ctx, log, src, cp, rebuild, "SQLite file "+file,
		func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM event_type_counts`)
			return err
		},
		func(ctx context.Context, tx *sql.Tx, e event.Event) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO event_type_counts (type, n) VALUES (?, 1)
			ON CONFLICT (type) DO UPDATE SET n = event_type_counts.n + 1`, e.Type)
			return err
		})
}

// project runs the projection under its checkpoint, on either database:
// clear empties it for a rebuild, count applies one event, each in the
// checkpoint's transaction.
func project[Tx any](ctx context.Context, log *slog.Logger, src checkpoint.Subscriber, cp *checkpoint.Consumer[Tx], rebuild bool,
	where string, clear func(context.Context, Tx) error, count func(context.Context, Tx, event.Event) error) error {
	if err := cp.EnsureSchema(ctx); err != nil {
		return err
	}
	if rebuild {
		// The projection and its checkpoint go together, in one
		// transaction: emptying one without the other would count events
		// twice or never.
		if err := cp.Rebuild(ctx, clear); err != nil {
			return err
		}
	}
	st, err := cp.Load(ctx)
	if err != nil {
		return err
	}
	log.Info("projecting into "+where, "after", st.Position, "epoch", st.Epoch)
	return cp.Run(ctx, src, count)
}

func appendDemo(ctx context.Context, node *orisun.Node, boundary string, n int) error {
	types := []string{"order.placed", "order.paid", "order.shipped"}
	for done := 0; done < n; {
		batch := make([]orisun.Input, 0, min(n-done, 500))
		for i := 0; i < cap(batch); i++ {
			data, _ := json.Marshal(map[string]int{"order": done + i})
			batch = append(batch, orisun.Input{Type: types[(done+i)%len(types)], Data: data})
		}
		if _, err := node.Append(ctx, boundary, batch, nil); err != nil {
			return fmt.Errorf("append demo events: %w", err)
		}
		done += len(batch)
	}
	return nil
}
