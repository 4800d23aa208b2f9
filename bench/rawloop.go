package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/natsembed"
	"github.com/orisun-io/orisun/stream"
)

// The raw loops: raw_relay and raw_e2e, the limits of the relay and of
// the latency rows. They are measured before the node starts, on the store
// the bench opened (its own page query) and on an embedded NATS server of
// their own with the node's settings.

// rawPage is the raw loops' page: the publisher's batch.
const rawPage = orisun.PublishBatchDefault

// rawServer is the raw loops' embedded NATS server and their connection
// to it: in process, as the node's publishers connect to theirs, and with
// the nats.go client's defaults (PublishAsyncMaxPending 4,000), as the
// documentation's examples leave them.
type rawServer struct {
	ns *natsembed.Server
	nc *nats.Conn
	js jetstream.JetStream
}

func (r *runner) startRawServer() (*rawServer, error) {
	ns, err := natsembed.New(natsembed.Config{
		Port:       -1,
		StoreDir:   filepath.Join(r.dir, "raw-jetstream"),
		MaxPayload: orisun.NATSMaxPayloadDefault,
		ServerName: "orisun-bench-raw",
		Logger:     r.logger.With("component", "raw-nats"),
	})
	if err != nil {
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	if err := ns.Start(); err != nil {
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	nc, err := ns.Connect("orisun-bench-raw")
	if err != nil {
		ns.Stop()
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		ns.Stop()
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	return &rawServer{ns: ns, nc: nc, js: js}, nil
}

func (s *rawServer) stop() {
	s.nc.Close()
	s.ns.Stop()
}

// rawBoundary readies the boundary for a raw loop: it creates the
// boundary's stream on the raw server, as the node would (the layout of
// package stream, the bench's stream limits), and its row of the raw
// loops' checkpoints, at 0. It returns a function that deletes the stream.
func (r *runner) rawBoundary(ctx context.Context, raw *rawServer, ck *rawCheckpoints, boundary, epoch string) (func(), error) {
	scfg := stream.Config(boundary, epoch, stream.Limits{MaxBytes: r.cfg.StreamMaxBytes,
		MaxMsgs: orisun.EventStreamMaxMsgsDefault, MaxAge: orisun.EventStreamMaxAgeDefault}, 1)
	if _, err := raw.js.CreateStream(ctx, scfg); err != nil {
		return nil, fmt.Errorf("bench: raw loops: create stream %s: %w", scfg.Name, err)
	}
	drop := func() { _ = raw.js.DeleteStream(context.Background(), scfg.Name) }
	if err := ck.add(ctx, boundary); err != nil {
		drop()
		return nil, err
	}
	return drop, nil
}

// rawLoop is the simplest correct relay of one boundary that a person
// following the nats.go documentation would write: read a page of 1,000
// after the checkpoint with the store's own page query (Store.Read),
// publish each event with PublishMsgAsync (the relay's message:
// stream.Message, with Nats-Msg-Id as configured, and the expected last
// sequence), await every acknowledgement, move the checkpoint, repeat. It
// reads nothing while a page is in flight: orisun's publisher does, and
// the relay row is compared with this loop for that reason.
type rawLoop struct {
	store    backend.Reader
	js       jetstream.JetStream
	boundary string
	msgID    bool
	ck       *rawCheckpoints
	// checkpoint is the last acknowledged position, also read by the
	// watchdog.
	checkpoint atomic.Uint64
}

// drain publishes page after page until a read comes back empty.
func (l *rawLoop) drain(ctx context.Context) error {
	for {
		after := l.checkpoint.Load()
		_, events, err := l.store.Read(ctx, l.boundary, after, rawPage, nil)
		if err != nil {
			return fmt.Errorf("read after %d: %w", after, err)
		}
		if len(events) == 0 {
			return nil
		}
		futures := make([]jetstream.PubAckFuture, len(events))
		for i := range events {
			msg, err := stream.Message(&events[i], l.msgID)
			if err != nil {
				return err
			}
			futures[i], err = l.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequence(events[i].Position-1))
			if err != nil {
				return fmt.Errorf("publish position %d: %w", events[i].Position, err)
			}
		}
		for i, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Sequence != events[i].Position {
					return fmt.Errorf("position %d acknowledged at %d", events[i].Position, ack.Sequence)
				}
			case err := <-f.Err():
				return fmt.Errorf("publish position %d: %w", events[i].Position, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		last := events[len(events)-1].Position
		if err := l.ck.save(ctx, l.boundary, last); err != nil {
			return err
		}
		l.checkpoint.Store(last)
	}
}

// rawCheckpoints are the raw loops' checkpoints: a row per boundary in a
// table of their own, moved by one UPDATE per page. The store's
// SaveCheckpoint (the same UPDATE with the lease's fence and a look at the
// head) cannot serve: the backlog's checkpoint must stay at 0 for the
// relay measured after the loop.
type rawCheckpoints struct {
	pg *pgxpool.Pool
	db *sql.DB // SQLite: a writer connection with the store's settings
}

// openRawWriter opens the raw loops' connections that write: PostgreSQL
// a small pool, SQLite one writer connection with the store's settings
// (the store's own writer is idle while the raw loops run). It creates
// the checkpoint table.
func (r *runner) openRawWriter(ctx context.Context) (*rawCheckpoints, error) {
	c := &rawCheckpoints{}
	if r.cfg.Backend == "postgres" {
		pcfg, err := pgxpool.ParseConfig(r.pgURL)
		if err != nil {
			return nil, fmt.Errorf("bench: raw loops: %w", err)
		}
		pcfg.MaxConns = 2
		if c.pg, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return nil, fmt.Errorf("bench: raw loops: %w", err)
		}
		if _, err := c.pg.Exec(ctx, `CREATE TABLE raw_checkpoints (boundary text PRIMARY KEY, position bigint NOT NULL)`); err != nil {
			c.pg.Close()
			return nil, fmt.Errorf("bench: raw loops: %w", err)
		}
		return c, nil
	}
	db, err := sql.Open("sqlite", sqlite.WriterDSN(filepath.Join(r.dir, sqlite.DBFile), orisun.SQLiteSynchronousDefault))
	if err != nil {
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE raw_checkpoints (boundary TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: raw loops: %w", err)
	}
	c.db = db
	return c, nil
}

func (c *rawCheckpoints) add(ctx context.Context, boundary string) error {
	var err error
	if c.pg != nil {
		_, err = c.pg.Exec(ctx, `INSERT INTO raw_checkpoints VALUES ($1, 0)`, boundary)
	} else {
		_, err = c.db.ExecContext(ctx, `INSERT INTO raw_checkpoints VALUES (?, 0)`, boundary)
	}
	if err != nil {
		return fmt.Errorf("bench: raw loops: checkpoint of %s: %w", boundary, err)
	}
	return nil
}

func (c *rawCheckpoints) save(ctx context.Context, boundary string, pos uint64) error {
	var err error
	if c.pg != nil {
		_, err = c.pg.Exec(ctx, `UPDATE raw_checkpoints SET position = $2 WHERE boundary = $1`, boundary, int64(pos))
	} else {
		_, err = c.db.ExecContext(ctx, `UPDATE raw_checkpoints SET position = ? WHERE boundary = ?`, int64(pos), boundary)
	}
	if err != nil {
		return fmt.Errorf("save checkpoint %d: %w", pos, err)
	}
	return nil
}

func (c *rawCheckpoints) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c.pg != nil {
		defer c.pg.Close()
		_, err := c.pg.Exec(ctx, `DROP TABLE IF EXISTS raw_checkpoints`)
		return err
	}
	defer c.db.Close()
	_, err := c.db.ExecContext(ctx, `DROP TABLE IF EXISTS raw_checkpoints`)
	return err
}

// rawRelay runs the raw loop over the backlog once.
func (r *runner) rawRelay(ctx context.Context, s backend.Store, raw *rawServer, ck *rawCheckpoints) error {
	r.progress("limit: the simple relay loop over the backlog of %d events (pages of %d, every acknowledgement awaited per page)", r.cfg.Events, rawPage)
	b, err := s.Boundary(ctx, relayBoundary)
	if err != nil {
		return fmt.Errorf("bench: raw relay: %w", err)
	}
	drop, err := r.rawBoundary(ctx, raw, ck, relayBoundary, b.Epoch)
	if err != nil {
		return err
	}
	defer drop()
	loop := &rawLoop{store: s, js: raw.js, boundary: relayBoundary, msgID: r.cfg.MsgID, ck: ck}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := r.watchdog(sctx, cancel, "raw relay", loop.checkpoint.Load)
	defer stop()
	m := startMeter()
	defer m.finish()
	err = loop.drain(sctx)
	row := m.row("limit", "raw_relay", int64(loop.checkpoint.Load()), r.cfg.EventBytes)
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if err != nil {
		return fmt.Errorf("bench: raw relay: %w", err)
	}
	row.StreamBytes = streamBytes(ctx, raw.js)
	row.Note = fmt.Sprintf("Store.Read of %d after the checkpoint, PublishMsgAsync of each (stream.Message, Nats-Msg-Id %v, expected last sequence; "+
		"PublishAsyncMaxPending at the client's default), every acknowledgement awaited, the checkpoint one UPDATE of a table of its own; "+
		"a NATS server of its own with the node's settings", rawPage, r.cfg.MsgID)
	r.rep.Limits = append(r.rep.Limits, row)
	r.rep.check("raw relay published = backlog", int64(r.cfg.Events), int64(loop.checkpoint.Load()))
	return nil
}

// rawE2EName names the raw_e2e row of a rate.
func rawE2EName(rate int) string { return fmt.Sprintf("raw_e2e %d events/s", rate) }

// rawE2EChannel is the PostgreSQL notification channel of raw_e2e.
const rawE2EChannel = "orisun_bench_raw_e2e"

// rawE2E is the latency rows' limit at one rate, for the latency
// duration: every millisecond a multi-row INSERT of the events due (the
// boundary's head moved in the same statement, as any correct append
// must), a notification (PostgreSQL NOTIFY in the same transaction, those
// that arrive while the loop works making one wake-up; SQLite has none,
// and the loop polls every millisecond), the raw loop woken by it, and a plain ordered consumer on the stream. Each event's
// latency runs from its scheduled time (start + k/rate), as in the
// latency rows.
func (r *runner) rawE2E(ctx context.Context, s backend.Store, raw *rawServer, ck *rawCheckpoints, rate int) error {
	boundary := fmt.Sprintf("bench_rawe2e_%d", rate)
	d := r.cfg.LatencyDuration
	r.progress("limit: insert every millisecond → notification → the simple relay loop → ordered consumer, %d events/s for %s", rate, d)
	b, _, err := s.CreateBoundary(ctx, boundary)
	if err != nil {
		return fmt.Errorf("bench: raw e2e: %w", err)
	}
	// Settled before the consumer, the loop and its watchdog start: a
	// VACUUM of a large backlog would otherwise count as the loop's stall.
	cp := r.beforePaced(ctx)
	drop, err := r.rawBoundary(ctx, raw, ck, boundary, b.Epoch)
	if err != nil {
		return err
	}
	defer drop()
	total := int(float64(rate) * d.Seconds())
	if total < 1 {
		return fmt.Errorf("%w: bench: rates × duration: %d events/s for %s is no event", event.ErrInvalid, rate, d)
	}
	// The consumer notes when each position arrives; it runs in one
	// goroutine (the subscription's), and the arrivals are read after
	// done closes.
	arrivals := make([]time.Time, total+1)
	var received atomic.Int64
	done := make(chan struct{})
	cons, err := raw.js.OrderedConsumer(ctx, stream.Name(boundary), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("bench: raw e2e: consumer: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		now := time.Now()
		pos, err := strconv.Atoi(msg.Headers().Get(stream.HeaderPosition))
		if err != nil || pos < 1 || pos > total || !arrivals[pos].IsZero() {
			return
		}
		arrivals[pos] = now
		if received.Add(1) == int64(total) {
			close(done)
		}
	})
	if err != nil {
		return fmt.Errorf("bench: raw e2e: consume: %w", err)
	}
	defer cc.Stop()

	insert, wait, closeRaw, err := r.rawE2EParts(ctx, ck, boundary)
	if err != nil {
		return err
	}
	defer closeRaw()
	loop := &rawLoop{store: s, js: raw.js, boundary: boundary, msgID: r.cfg.MsgID, ck: ck}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := r.watchdog(lctx, cancel, "raw e2e", loop.checkpoint.Load)
	defer stop()
	loopErr := make(chan error, 1)
	loopDone := make(chan struct{})
	// Registered after closeRaw, so it runs before it: the loop has left
	// its connections before they close.
	defer func() {
		cancel(nil)
		<-loopDone
	}()
	go func() {
		defer close(loopDone)
		for {
			if err := loop.drain(lctx); err != nil {
				loopErr <- err
				return
			}
			if err := wait(lctx); err != nil {
				loopErr <- err
				return
			}
		}
	}()

	m := startMeter()
	defer m.finish()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	inserted := 0
	for inserted < total {
		select {
		case <-tick.C:
		case err := <-loopErr:
			tick.Stop()
			return fmt.Errorf("bench: raw e2e: the loop: %w", err)
		case <-lctx.Done():
			tick.Stop()
			return context.Cause(lctx)
		}
		due := min(int(float64(rate)*time.Since(start).Seconds()), total)
		if due > inserted {
			if err := insert(lctx, due-inserted); err != nil {
				tick.Stop()
				return fmt.Errorf("bench: raw e2e: insert: %w", err)
			}
			inserted = due
		}
	}
	tick.Stop()
	sending := time.Since(start)
	select {
	case <-done:
	case err := <-loopErr:
		return fmt.Errorf("bench: raw e2e: the loop: %w", err)
	case <-lctx.Done():
		return context.Cause(lctx)
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("bench: raw e2e: %d of %d events received 5 minutes after the last insert", received.Load(), total)
	}
	row := m.row("limit", rawE2EName(rate), int64(total), r.cfg.EventBytes)
	r.noteCheckpoints(ctx, &row, cp)
	cancel(nil)
	row.StreamBytes = streamBytes(ctx, raw.js)
	lat := make([]time.Duration, 0, total)
	for k := 1; k <= total; k++ {
		lat = append(lat, arrivals[k].Sub(start.Add(time.Duration(float64(k-1)*float64(time.Second)/float64(rate)))))
	}
	res := &pacedResult{lat: lat, appended: int64(total), received: received.Load(), sending: sending}
	row.TargetRate = rate
	res.fill(&row)
	wake := "NOTIFY in the insert's transaction, the loop woken through LISTEN (notifications arriving while it works make one wake-up)"
	if r.cfg.Backend == "sqlite" {
		wake = "no notification on SQLite: the loop reads again every millisecond"
	}
	row.Note = fmt.Sprintf("a multi-row INSERT of the events due every millisecond (head moved in the same statement), %s, the raw_relay loop, "+
		"a plain ordered consumer; %s", wake, row.Note)
	r.rep.Limits = append(r.rep.Limits, row)
	r.rep.check(fmt.Sprintf("raw e2e %d/s: events received = events inserted", rate), int64(total), received.Load())
	// The node will adopt this boundary: it finds it published (the
	// store's checkpoint at the head), so its relay has nothing to do
	// with it.
	return markPublished(ctx, s, boundary, uint64(total))
}

// rawE2EParts returns raw_e2e's insert of n events (with its
// notification) and the loop's wait for the next wake-up.
func (r *runner) rawE2EParts(ctx context.Context, ck *rawCheckpoints, boundary string) (
	insert func(ctx context.Context, n int) error, wait func(ctx context.Context) error, closeAll func(), err error) {
	data := string(r.data)
	if r.cfg.Backend == "postgres" {
		prod, err := pgx.Connect(ctx, r.pgURL)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("bench: raw e2e: %w", err)
		}
		listen, err := pgx.Connect(ctx, r.pgURL)
		if err != nil {
			prod.Close(context.Background())
			return nil, nil, nil, fmt.Errorf("bench: raw e2e: %w", err)
		}
		closeAll = func() {
			prod.Close(context.Background())
			listen.Close(context.Background())
		}
		if _, err := listen.Exec(ctx, "LISTEN "+rawE2EChannel); err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("bench: raw e2e: %w", err)
		}
		ids := make([]string, 0, 64)
		datas := make([]string, 0, 64)
		insert = func(ctx context.Context, n int) error {
			ids, datas = ids[:0], datas[:0]
			for range n {
				ids = append(ids, event.NewID())
				datas = append(datas, data)
			}
			// One round trip, one implicit transaction: the notification
			// is delivered at the commit.
			var b pgx.Batch
			b.Queue(`WITH h AS (
    UPDATE orisun_boundaries SET head = head + cardinality($2::uuid[]) WHERE name = $1
    RETURNING head - cardinality($2::uuid[]) AS base)
INSERT INTO orisun_events (boundary, position, id, type, time, tags, data, metadata)
SELECT $1, h.base + u.ord, u.id, 'bench.event', statement_timestamp(), ARRAY['bench'], u.data::json, NULL
FROM h, unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS u(id, data, ord)`, boundary, ids, datas)
			b.Queue(`SELECT pg_notify($1, $2)`, rawE2EChannel, boundary)
			return prod.SendBatch(ctx, &b).Close()
		}
		// The listener turns notifications into wake-ups, at most one
		// pending: the loop reads everything committed when it wakes, so a
		// notification that arrived meanwhile has nothing more to say (a
		// loop that read once per notification fell behind for good
		// once a read took longer than the millisecond between them).
		wake := make(chan struct{}, 1)
		lctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := listen.WaitForNotification(lctx); err != nil {
					return
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
		closeConns := closeAll
		closeAll = func() {
			stop()
			<-done
			closeConns()
		}
		wait = func(ctx context.Context) error {
			select {
			case <-wake:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return insert, wait, closeAll, nil
	}
	stmts := map[int]string{}
	args := make([]any, 0, 8*64)
	insert = func(ctx context.Context, n int) error {
		stmt, ok := stmts[n]
		if !ok {
			stmt = `INSERT INTO events (boundary, position, id, type, time, tags, data, metadata) VALUES ` +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?),", n), ",")
			stmts[n] = stmt
		}
		tx, err := ck.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (the writer's _txlock)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		var head int64
		if err := tx.QueryRowContext(ctx, `UPDATE boundaries SET head = head + ? WHERE name = ? RETURNING head`, n, boundary).Scan(&head); err != nil {
			return err
		}
		now := time.Now().UnixNano()
		args = args[:0]
		for i := range n {
			args = append(args, boundary, head-int64(n)+int64(i)+1, event.NewID(), "bench.event", now, `["bench"]`, data, nil)
		}
		if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
			return err
		}
		return tx.Commit()
	}
	wait = func(ctx context.Context) error {
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	return insert, wait, func() {}, nil
}

// markPublished moves the store's checkpoint of a boundary the raw loops
// published to its head, under a lease of the bench's, so that the node
// finds nothing of it to publish.
func markPublished(ctx context.Context, s backend.Store, boundary string, head uint64) error {
	l, err := s.AcquireLease(ctx, boundary, "orisun-bench-raw", nil, time.Minute)
	if err != nil {
		return fmt.Errorf("bench: raw e2e: %w", err)
	}
	if err := s.SaveCheckpoint(ctx, boundary, l, head); err != nil {
		return fmt.Errorf("bench: raw e2e: %w", err)
	}
	if err := s.ReleaseLease(ctx, l); err != nil {
		return fmt.Errorf("bench: raw e2e: %w", err)
	}
	return nil
}

// streamBytes is what the streams of the server of js hold (0 when it
// cannot be read: the row then shows no stream bytes rather than fail).
func streamBytes(ctx context.Context, js jetstream.JetStream) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return 0
	}
	return int64(info.Memory + info.Store)
}
