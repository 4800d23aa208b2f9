package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/outbox"
)

// outboxCallers is the outbox workload's concurrency: the application
// transactions running at once (issue 19's 64).
const outboxCallers = 64

// outboxDrainTarget is how soon after the enqueue row's last commit every
// enqueued event should be in the log (the staged backlog stays bounded).
const outboxDrainTarget = time.Second

// The outbox workload's three ways of running one application
// transaction.
const (
	outboxNone    = "no event"
	outboxEnqueue = "orisun_enqueue"
	outboxAppend  = "orisun_append"
	// outboxBare writes the event's data as a bare row: a table with a
	// primary key only, nothing checked, nothing moved afterwards.
	outboxBare = "bare event row"
)

// outboxFloorName is the limit row of the transactions with a bare event
// row: a floor for a staging that writes one keyed row per event, so
// orisun_enqueue's ratio is read against it too.
const outboxFloorName = "app_tx_bare_event"

// outboxTable is an application's table: a primary key, a secondary index,
// and a row of the event's size.
var outboxTable = []string{`CREATE TABLE %[1]s (
	id uuid PRIMARY KEY,
	customer text NOT NULL,
	payload text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
)`, `CREATE INDEX %[1]s_customer ON %[1]s (customer)`}

// appTx is one application transaction on a table of its own: the row,
// the event through package outbox (or none), the commit.
type appTx struct {
	pool  *pgxpool.Pool
	table string
	how   string
	row   string // the row's payload: the run's event data
	n     atomic.Int64
	// committed counts the transactions committed with one event.
	committed atomic.Int64
}

// run runs one transaction with the events in (none: no event).
func (a *appTx) run(ctx context.Context, boundary string, in []event.Input) error {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	k := a.n.Add(1)
	if _, err := tx.Exec(ctx, `INSERT INTO `+a.table+` (id, customer, payload) VALUES ($1, $2, $3)`,
		event.NewID(), fmt.Sprintf("c-%06d", k%10_000), a.row); err != nil {
		return err
	}
	switch a.how {
	case outboxEnqueue:
		if _, err := outbox.Enqueue(ctx, tx, boundary, in); err != nil {
			return err
		}
	case outboxAppend:
		if _, err := outbox.Append(ctx, tx, boundary, in, nil); err != nil {
			return err
		}
	case outboxBare:
		if _, err := tx.Exec(ctx, `INSERT INTO `+a.table+`_event (id, data) VALUES ($1, $2::json)`,
			in[0].ID, in[0].Data); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if len(in) == 1 {
		a.committed.Add(1)
	}
	return nil
}

// outboxAPI drives the paced rows through application transactions that
// enqueue their event; subscriptions and heads are the node's.
type outboxAPI struct {
	nodeAPI
	tx *appTx
}

func (o outboxAPI) Append(ctx context.Context, boundary string, in []event.Input, _ *event.Condition) (event.AppendResult, error) {
	return event.AppendResult{}, o.tx.run(ctx, boundary, in)
}

// Head is the boundary's head once every committed enqueue is in the log
// (paced asks once sending is over, and waits for its subscriber to
// deliver up to it); the mover may not have moved the last ones yet.
func (o outboxAPI) Head(ctx context.Context, boundary string) (uint64, error) {
	return o.nodeAPI.waitHead(ctx, boundary, uint64(o.tx.committed.Load()))
}

// outbox measures appends from the application's own transaction
// (docs/outbox.md), PostgreSQL only: outboxCallers concurrent transactions
// each inserting a row of EventBytes into a table with a primary key and a
// secondary index, synchronous_commit on; the limit is those transactions
// without an event, the rows the same with orisun_enqueue and with
// orisun_append; then the latency from each enqueuing transaction's
// scheduled time to a live subscriber's delivery at each outbox rate.
func (r *runner) outbox(ctx context.Context) error {
	if r.cfg.Backend != "postgres" {
		r.rep.Notes = append(r.rep.Notes, "outbox: not applicable on "+r.cfg.Backend+
			" (the SQL functions orisun_enqueue and orisun_append are PostgreSQL's; an embedding program on SQLite uses Node.AppendTx)")
		r.progress("outbox: not applicable on %s", r.cfg.Backend)
		return nil
	}
	pc, err := pgxpool.ParseConfig(r.pgURL)
	if err != nil {
		return fmt.Errorf("bench: outbox: %w", err)
	}
	pc.MaxConns = outboxCallers
	pc.MinConns = outboxCallers
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pc.ConnConfig.RuntimeParams["application_name"] = "orisun-bench-outbox"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("bench: outbox: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("bench: outbox: %w", err)
	}
	var limit, floor *Row
	for i, how := range []string{outboxNone, outboxBare, outboxEnqueue, outboxAppend} {
		a, boundary, err := r.outboxSetup(ctx, pool, fmt.Sprintf("%d", i), how)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("app tx %s, %d callers", how, outboxCallers)
		r.progress("outbox: %s for %s", name, r.cfg.AppendDuration)
		var n atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, outboxCallers)
		m := startMeter()
		defer m.finish()
		deadline := time.Now().Add(r.cfg.AppendDuration)
		for range outboxCallers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					var in []event.Input
					if how != outboxNone {
						in = r.inputs(1)
					}
					if err := a.run(ctx, boundary, in); err != nil {
						errs <- fmt.Errorf("bench: outbox %s: %w", how, err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if how == outboxNone {
			row := m.row("limit", "app_tx", n.Load(), r.cfg.EventBytes)
			row.Note = fmt.Sprintf("%d concurrent application transactions (a %d-byte row into a table with a primary key and a secondary index, synchronous_commit on) without an event: the outbox rows' limit",
				outboxCallers, len(r.data))
			r.rep.Limits = append(r.rep.Limits, row)
			limit = &r.rep.Limits[len(r.rep.Limits)-1]
			continue
		}
		if how == outboxBare {
			row := m.row("limit", outboxFloorName, n.Load(), r.cfg.EventBytes)
			row.against(limit)
			row.Note = fmt.Sprintf("the same transactions with the event's data as a bare row (a table with a primary key only) in a statement of its own: nothing checked, staged or moved; "+
				"a floor for a staging that writes one keyed row per event: orisun_enqueue's target of 0.8 of app_tx is within reach of such a staging only if this ratio (%.2f) is above 0.8",
				row.Ratio)
			r.rep.Limits = append(r.rep.Limits, row)
			floor = &r.rep.Limits[len(r.rep.Limits)-1]
			continue
		}
		// The row ends at the last commit; for the enqueue row, how long
		// the mover then took to bring every enqueued event into the log.
		row := m.row("outbox", name, n.Load(), r.cfg.EventBytes)
		end := time.Now()
		var drained time.Duration
		if how == outboxEnqueue {
			if _, err := (nodeAPI{r.node}).waitHead(ctx, boundary, uint64(n.Load())); err != nil {
				return err
			}
			drained = time.Since(end)
		}
		row.StreamBytes = streamBytes(ctx, r.js)
		row.against(limit)
		row.also(floor)
		if how == outboxEnqueue {
			row.DrainMs = float64(drained.Microseconds()) / 1000
			row.Note = fmt.Sprintf("every enqueued event was in the log %.0f ms after the last commit (target %s); target ratio to app_tx ≥ 0.8",
				row.DrainMs, outboxDrainTarget)
		} else {
			row.Note = "orisun_append holds the boundary's head row until each transaction ends: the boundary's appends are serialised"
		}
		r.rep.Rows = append(r.rep.Rows, row)
		if _, err := r.waitPublished(ctx, boundary, uint64(n.Load()), 10*time.Minute); err != nil {
			return err
		}
		if err := r.checkPublished(ctx, boundary, n.Load(), "outbox "+how); err != nil {
			return err
		}
	}
	for _, rate := range r.cfg.OutboxRates {
		a, boundary, err := r.outboxSetup(ctx, pool, fmt.Sprintf("latency_%d", rate), outboxEnqueue)
		if err != nil {
			return err
		}
		r.progress("outbox: enqueue latency at %d events/s for %s", rate, r.cfg.LatencyDuration)
		row, res, err := r.latencyRow(ctx, outboxAPI{nodeAPI{r.node}, a}, boundary, rate, "outbox", fmt.Sprintf("enqueue latency %d events/s", rate))
		if err != nil {
			return err
		}
		row.Note = "from each transaction's scheduled time through its commit to a live subscriber's delivery; the transaction alone is the Append figure, " +
			"from its commit to the delivery the commit figure; " + row.Note
		r.rep.Rows = append(r.rep.Rows, row)
		r.rep.check(fmt.Sprintf("outbox latency %d/s: events received = events enqueued", rate), res.appended, res.received)
	}
	return nil
}

// waitHead polls the boundary's head until it reaches want (5 minutes at
// most) and returns it.
func (n nodeAPI) waitHead(ctx context.Context, boundary string, want uint64) (uint64, error) {
	start := time.Now()
	for {
		b, err := n.Boundary(ctx, boundary)
		if err != nil {
			return 0, fmt.Errorf("bench: %w", err)
		}
		if b.Head >= want {
			return b.Head, nil
		}
		if time.Since(start) > 5*time.Minute {
			return 0, fmt.Errorf("bench: outbox: %d of %d enqueued events in the log after 5 minutes", b.Head, want)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// outboxSetup creates a boundary and an application table for one row.
func (r *runner) outboxSetup(ctx context.Context, pool *pgxpool.Pool, suffix, how string) (*appTx, string, error) {
	boundary := "bench_outbox_" + suffix
	table := "bench_app_" + suffix // letters, digits and '_': no quoting needed
	if how != outboxNone && how != outboxBare {
		if _, err := r.node.CreateBoundary(ctx, boundary); err != nil {
			return nil, "", fmt.Errorf("bench: %w", err)
		}
	}
	stmts := outboxTable
	if how == outboxBare {
		stmts = append(slices.Clip(stmts), `CREATE TABLE %[1]s_event (id uuid PRIMARY KEY, data json NOT NULL)`)
	}
	for _, stmt := range stmts {
		if _, err := pool.Exec(ctx, fmt.Sprintf(stmt, table)); err != nil {
			return nil, "", fmt.Errorf("bench: outbox table: %w", err)
		}
	}
	return &appTx{pool: pool, table: table, how: how, row: string(r.data)}, boundary, nil
}
