package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// Append appends events to boundary atomically (all or none), under cond
// when it is not nil. The events must be prepared (event.Prepare). The
// request joins the next group commit of its boundary; see the package
// documentation.
//
// A caller whose ctx ends while its request waits in the queue gets
// ctx.Err() and nothing of the request is written. Once a group has taken
// the request, Append waits for and returns its real outcome. An error
// means "not written", with one exception that no network database can
// avoid: when the connection breaks while the COMMIT is under way, the
// outcome is unknown and the error is ErrUnavailable; appending the same
// events again (same ids) then returns the stored positions if the commit
// did happen (docs/design.md §3).
func (s *Store) Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	// The operation's name is formatted only for an error: every append
	// passes here.
	op := func() string { return fmt.Sprintf("append to %q", boundary) }
	if err := sqlstore.CheckAppend(ctx, reads{s}, events); err != nil {
		return event.AppendResult{}, fmt.Errorf("postgres: %s: %w", op(), err)
	}
	r := sqlstore.NewRequest(ctx, boundary, events, cond)
	if !s.enqueue(r) {
		return event.AppendResult{}, errClosed(op())
	}
	rep, abandoned := r.Wait()
	if abandoned {
		s.waiting.Add(-1)
		return event.AppendResult{}, fmt.Errorf("postgres: %s: %w", op(), ctx.Err())
	}
	return rep.Res, rep.Err
}

// enqueue adds r to its boundary's queue and makes the boundary ready for a
// worker unless a worker has it already (that worker requeues it when its
// group is done). false: the store is closing.
func (s *Store) enqueue(r *sqlstore.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	q := s.queues[r.Boundary]
	s.queues[r.Boundary] = append(q, r)
	s.waiting.Add(1)
	if len(q) == 0 && !s.active[r.Boundary] && !s.held[r.Boundary] {
		s.ready = append(s.ready, r.Boundary)
		s.cond.Signal()
	}
	if ch := s.gathered[r.Boundary]; ch != nil && len(q)+1 >= s.expect[r.Boundary] {
		close(ch)
		delete(s.gathered, r.Boundary)
	}
	return true
}

// worker runs group transactions until the store closes. Each group belongs
// to one boundary. A boundary is opened by one worker at a time: from
// taking its requests until the group holds the boundary's head row. Once
// it does, the next group of the boundary may begin on another worker and
// connection while the first commits: its statements reach the database
// and wait there for the head row, which it then takes at once, instead of
// being sent only after the first group's answers came back. One group of a
// boundary holds the head row and at most one more waits for it (the
// waiting one holds the boundary open until it has the row, which is after
// the first committed; the first may still run lookups after its COMMIT),
// and they commit in the order they began, so requests keep their order of
// arrival. A boundary whose head row another client holds ties up one
// worker, never the appends of other boundaries (unless every worker is so
// tied up).
func (s *Store) worker() {
	defer s.workers.Done()
	s.mu.Lock()
	for {
		for len(s.ready) == 0 && !s.closing {
			s.cond.Wait()
		}
		if s.closing {
			s.mu.Unlock()
			return
		}
		b := s.ready[0]
		s.ready = s.ready[1:]
		if s.active[b] {
			// Not reached today: enqueue and requeue add a boundary only
			// when no worker opens it. Kept so that no future path can
			// open a boundary twice; the opener requeues it.
			continue
		}
		if d := s.cfg.GroupDelay; d > 0 && len(s.queues[b]) < s.expect[b] {
			// Let more requests join, up to as many as the last group had
			// and left waiting: the callers of the last group usually come
			// back at once, and a lone caller (expecting one) never waits.
			// The boundary is this worker's (active) while it waits, so no
			// other worker takes it.
			s.active[b] = true
			ch := make(chan struct{})
			s.gathered[b] = ch
			s.mu.Unlock()
			s.waitDelay(d, ch)
			s.mu.Lock()
			if s.gathered[b] == ch {
				delete(s.gathered, b)
			}
			delete(s.active, b)
			if s.closing {
				s.mu.Unlock()
				return
			}
		}
		group := s.drain(b)
		s.expect[b] = len(group) + len(s.queues[b])
		if len(group) == 0 {
			continue // every request of the queue was abandoned
		}
		s.active[b] = true
		s.mu.Unlock()

		locked := false
		s.commitGroup(b, group, func() {
			// The group holds the head row: the next group may begin.
			locked = true
			s.mu.Lock()
			// The group's callers come back once it is answered, and the
			// requests that arrived while it ran still wait: together,
			// what the next group can expect (the count taken when the
			// group was formed misses the latter, and a boundary's 64
			// callers then kept splitting into two groups of about 32).
			s.expect[b] = len(group) + len(s.queues[b])
			delete(s.active, b)
			s.requeue(b)
			hook := s.lockedHook
			s.mu.Unlock()
			if hook != nil {
				hook(b)
			}
		})

		s.mu.Lock()
		if !locked {
			// The group ended before it took the head row (every request
			// gone, or the transaction failed first).
			delete(s.active, b)
		}
		s.requeue(b)
	}
}

// knownHead is boundary b's head as this store last saw it (see
// groupRun.near), 0 when it has not.
func (s *Store) knownHead(b string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[b]
}

// noteHead records boundary b's head as a group saw it (when it took the
// head row, and after it committed). Groups of a boundary commit in order,
// but their goroutines may get here out of it: the head only grows.
func (s *Store) noteHead(b string, head int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heads[b] = max(s.heads[b], head)
}

// noteHeads records the heads Heads read, under one lock.
func (s *Store) noteHeads(heads []backend.Head) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range heads {
		s.heads[h.Boundary.Name] = max(s.heads[h.Boundary.Name], int64(h.Boundary.Head))
	}
}

// requeue makes boundary b ready for a worker when requests wait for it and
// no worker is opening it already. More requests arrived meanwhile: back of
// the line, so a busy boundary cannot starve the others. The caller holds
// s.mu.
func (s *Store) requeue(b string) {
	if len(s.queues[b]) > 0 && !s.closing && !s.held[b] && !s.active[b] && !slices.Contains(s.ready, b) {
		s.ready = append(s.ready, b)
		s.cond.Signal()
	}
}

// waitDelay waits d, or less when enough requests gathered or the store
// closes.
func (s *Store) waitDelay(d time.Duration, gathered <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-gathered:
	case <-s.closed:
	}
}

// holdGroups makes the workers begin no group of boundary b until release
// is called; queued reports how many requests of b wait meanwhile. The
// requests waiting at release go in the next group (up to GroupMaxEvents),
// in their order of arrival. For tests: it puts requests in one group
// deterministically, without timing. A group of b already running is not
// held.
func (s *Store) holdGroups(b string) (queued func() int, release func()) {
	s.mu.Lock()
	s.held[b] = true
	s.mu.Unlock()
	var once sync.Once
	queued = func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, r := range s.queues[b] {
			if r.Queued() {
				n++
			}
		}
		return n
	}
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.held, b)
			s.requeue(b)
		})
	}
	return queued, release
}

// drain takes the requests for the next group of boundary b off its queue:
// every request waiting right now (never sleeping to wait for more: a lone
// append commits at once), up to GroupMaxEvents events; a request that does
// not fit stays first in line. The caller holds s.mu.
func (s *Store) drain(b string) []*sqlstore.Request {
	q := s.queues[b]
	var group []*sqlstore.Request
	n, i := 0, 0
	for ; i < len(q); i++ {
		r := q[i]
		if !r.Queued() {
			continue // abandoned by its caller
		}
		if len(group) > 0 && n+len(r.Events) > s.cfg.GroupMaxEvents {
			break
		}
		group = append(group, r)
		n += len(r.Events)
	}
	if i == len(q) {
		delete(s.queues, b)
	} else {
		s.queues[b] = q[i:]
	}
	return group
}

// The steps of a group transaction, sent to the database as pipelined
// batches.
type stepKind int

const (
	stepBegin      stepKind = iota
	stepLock                // take and read the head row
	stepSavepoint           // a request's savepoint
	stepAppend              // a request's append statement
	stepRelease             // release a request's savepoint
	stepRollbackTo          // roll a failed request back to its savepoint (not batched)
	stepFindIDs             // a request's stored ids (retry or conflict?)
	stepFirstMatch          // a request's condition's first match
	stepBeyond              // the first match beyond the head of a condition that matched nothing up to it
	stepAppendRun           // one append statement for a run of requests without conditions
	stepPlans               // set plan_cache_mode for the statements after it (see planModes)
	stepNotify              // the wake-up notification, delivered on commit
	stepCommit              // the COMMIT, sent with the batch that writes
)

type step struct {
	kind stepKind
	req  int // index into the group's requests; -1 for group steps
	// run is the requests of a merged append (stepAppendRun, and the
	// savepoint and release around it).
	run  []int
	sql  string
	args []any
	// plan is the plan_cache_mode the statement needs (sqlGenericPlans or
	// sqlCustomPlans; "" for any), set before it by planModes.
	plan string
}

// groupRun is the state of one group transaction. The sqlite backend has a
// type of the same name and role, with the same steps where they fit
// (take, appendAll, commit, fail, answer); here the statements go as
// pipelined batches.
type groupRun struct {
	s        *Store
	boundary string
	conn     *pgxpool.Conn
	reqs     []*sqlstore.Request
	replies  []sqlstore.Reply
	wrote    []bool
	// decided is true once a request's reply is final (written, or failed
	// with its own error).
	decided []bool
	// The head row as locked, then after each request that wrote;
	// lockHead stays the head as locked.
	head      int64
	lockHead  int64
	epoch     string
	missing   bool // the head-row lock found no boundary
	open      bool // the transaction is open: the COMMIT has not run
	committed bool // the COMMIT succeeded
	// commitSent: a COMMIT was queued to be sent, whatever came of it.
	// Without committed, its outcome may be unknown here (an error on the
	// client's side after the server ran it), and the listener passes over
	// the NOTIFY it carried as the pool's own: the callbacks are called for
	// it anyway.
	commitSent bool
	// decisions of requests whose append statement wrote nothing.
	decisions map[int]*decision
	// locked is called once the head-row lock's result is read.
	locked func()
	// knownHead is the boundary's head as the store last saw it when the
	// group began (0: never): how far back a condition's position is,
	// roughly.
	knownHead int64
}

// decision is what the slow path of a request learns: the head it saw, its
// stored ids, its condition's first match, and the error of its append
// statement if it failed.
type decision struct {
	headAt    int64
	stored    map[string]event.Event
	match     int64
	matched   bool
	appendErr error
	// beyond is true once the condition matched nothing up to headAt
	// although the append statement saw a match: a row beyond the head,
	// which the stepBeyond lookup finds (at beyondAt; 0: none).
	beyond   bool
	beyondAt int64
}

// commitGroup runs the requests of a group, all for boundary b, in one
// transaction, each inside its own savepoint: a request that fails is
// rolled back alone and gets its own error, the others commit together.
// All requests are taken at once: their turn is the batch that sends them.
//
// The statements are pipelined: the first batch is BEGIN, the head-row
// lock, and every request's SAVEPOINT, append statement and RELEASE, so a
// group of requests that all write costs one round trip and the COMMIT.
// An append statement that fails (a stored id: a retry or a conflict; a
// value the database refuses) aborts its savepoint and makes the database
// skip the rest of the batch; the next batch rolls that request back,
// looks up what it needs to decide it, and sends the skipped requests
// again. A request whose condition matched wrote nothing and needs the same
// lookups. The lookups are bounded by the head the request saw, so they
// judge it exactly as if it had run alone at its turn.
//
// locked is called once the group holds the boundary's head row, while
// the group goes on; not at all when the group ends before, or finds no
// boundary.
func (s *Store) commitGroup(b string, group []*sqlstore.Request, locked func()) {
	s.groups.Add(1)
	// The transaction belongs to the group, not to any one caller: a
	// caller that goes away must not abort the others' commit.
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()

	g := &groupRun{s: s, boundary: b, decisions: map[int]*decision{}, locked: locked, knownHead: s.knownHead(b)}
	// Registered first, so it runs last, after the connection went back
	// to the pool: the callers get their answers, then the callbacks run.
	defer func() {
		g.answer()
		switch {
		case g.committed && g.touched():
			s.noteHead(b, g.head)
			s.notify(b)
		case g.commitSent && !g.committed:
			// A hint too many is harmless; one too few leaves this
			// node's publisher to the head watcher's next read.
			s.notify(b)
		}
	}()
	var todo []int // the requests to run: indices into g.reqs
	for _, r := range group {
		if i, ok := g.take(r); ok {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		g.fail(g.groupErr("begin", err))
		return
	}
	g.conn = conn
	// Release destroys a connection left inside a transaction or broken,
	// so a failed group never hands a dirty session to the next user.
	defer conn.Release()

	steps := []step{
		{kind: stepBegin, req: -1, sql: sqlBegin},
		{kind: stepLock, req: -1, sql: sqlLockHead, args: []any{b}},
	}
	if !g.appendAll(ctx, g.addRequests(steps, todo)) {
		return // every request of the group was answered
	}
	g.finish(ctx)
}

// take takes r for its turn and gives it a reply slot (an index into
// g.reqs and g.replies). false: its caller gave up, or its context ended
// and it was answered so; nothing of it is written.
func (g *groupRun) take(r *sqlstore.Request) (slot int, ok bool) {
	if !r.Take() {
		return 0, false // its caller gave up before its turn
	}
	g.s.waiting.Add(-1)
	slot = len(g.reqs)
	g.reqs = append(g.reqs, r)
	g.replies = append(g.replies, sqlstore.Reply{})
	g.wrote = append(g.wrote, false)
	g.decided = append(g.decided, false)
	if err := r.Ctx.Err(); err != nil {
		// Its context ended before its turn: nothing of it is written.
		g.replies[slot].Err = fmt.Errorf("postgres: append to %q: %w", g.boundary, err)
		g.decided[slot] = true
		return 0, false
	}
	return slot, true
}

// addRequests adds the steps of the requests of todo, in order, to steps
// (the group's first batch, after BEGIN and the head-row lock).
// Consecutive requests without a condition append in one statement:
// nothing they do depends on each other, and a statement per request
// (with its savepoint) was most of a group's work on the server. A run
// that fails (a stored id) goes again one request at a time.
func (g *groupRun) addRequests(steps []step, todo []int) []step {
	for k := 0; k < len(todo); {
		end := k
		for end < len(todo) && g.reqs[todo[end]].Cond == nil {
			end++
		}
		if end-k >= 2 && !g.s.perRequest {
			steps = append(steps, g.runSteps(todo[k:end])...)
			k = end
			continue
		}
		steps = append(steps, g.requestSteps(todo[k])...)
		k++
	}
	return steps
}

// appendAll sends steps, and the steps each batch leaves to do, until none
// are left. false: the group transaction is lost and every request was
// answered.
func (g *groupRun) appendAll(ctx context.Context, steps []step) bool {
	g.open = true
	for len(steps) > 0 {
		if g.open && writesUnconditioned(g, steps) {
			// The NOTIFY and the COMMIT ride with a batch that writes:
			// a group whose requests all succeed costs one round trip. A
			// statement that fails makes the database skip the rest of
			// the batch, the COMMIT with it, so the transaction is still
			// open for the rollback to the failed request's savepoint and
			// the requests after it. A conditional request whose
			// condition matched wrote nothing and fails nothing: the
			// others commit, and its lookups (bounded by the head it saw,
			// so they give the same answer after the commit) run in the
			// next batch. Only a batch with an append without a condition
			// carries the COMMIT: one whose requests all have conditions
			// may write nothing (a decision load: most conflict), and then
			// it needs no COMMIT, WAL flush or notification at all.
			steps = append(steps,
				step{kind: stepNotify, req: -1, sql: sqlNotify, args: []any{notifyChannel, g.boundary}},
				step{kind: stepCommit, req: -1, sql: sqlCommit})
			g.commitSent = true
		}
		next, err := g.runBatch(ctx, steps)
		if err != nil {
			if g.open {
				g.rollback()
			}
			g.fail(err)
			return false
		}
		steps = next
	}
	return true
}

// finish ends the group once every step ran: a request left without an
// outcome gets an internal error, and a transaction still open (the last
// batch only looked up) commits what the earlier batches wrote, or rolls
// back when nothing was written.
func (g *groupRun) finish(ctx context.Context) {
	for i := range g.reqs {
		if !g.wrote[i] && !g.decided[i] {
			// Never answer "success at position 0": a request the steps
			// left without an outcome is a bug, said as such.
			g.replies[i].Err = fmt.Errorf("postgres: append to %q: internal error: the group left the request without an outcome", g.boundary)
			g.decided[i] = true
		}
	}
	if g.open {
		if !g.touched() {
			// Nothing written (all failed, retried or gone): no COMMIT, no
			// WAL flush.
			g.rollback()
			return
		}
		// The last batch only looked up (a request it decided was the
		// last of the group): commit what the earlier batches wrote. The
		// notification is part of the transaction: PostgreSQL delivers it
		// on commit, and only then.
		if err := g.commit(ctx); err != nil {
			g.fail(err)
			return
		}
		g.committed = true
	}
	for i := range g.reqs {
		if g.wrote[i] {
			g.decided[i] = true
		}
	}
}

// touched reports whether a request of the group wrote.
func (g *groupRun) touched() bool {
	for i := range g.reqs {
		if g.wrote[i] {
			return true
		}
	}
	return false
}

// writesUnconditioned reports whether steps hold an append statement of a
// request (or run) without a condition: one that writes unless it fails.
func writesUnconditioned(g *groupRun, steps []step) bool {
	for _, st := range steps {
		if st.kind == stepAppendRun || st.kind == stepAppend && g.reqs[st.req].Cond == nil {
			return true
		}
	}
	return false
}

// requestSteps are the steps of request i: its savepoint, its append
// statement, and the release of its savepoint.
func (g *groupRun) requestSteps(i int) []step {
	r := g.reqs[i]
	var cols eventColumns
	cols.add(r.Events)
	near := r.Cond != nil && g.near(r.Cond.After)
	sql, fargs := appendSQL(r.Cond, near)
	args := cols.args(r.Boundary)
	plan := sqlGenericPlans
	if r.Cond != nil {
		args = append(args, backend.ClampPosition(r.Cond.After))
		args = append(args, fargs...)
		if !near {
			plan = sqlCustomPlans
		}
	}
	return []step{
		{kind: stepSavepoint, req: i, sql: sqlSavepoint},
		{kind: stepAppend, req: i, sql: sql, args: args, plan: plan},
		{kind: stepRelease, req: i, sql: sqlRelease},
	}
}

// runSteps are the steps of a run of requests without conditions: one
// savepoint, one append statement for all their events in order, one
// release.
func (g *groupRun) runSteps(run []int) []step {
	var cols eventColumns
	for _, i := range run {
		cols.add(g.reqs[i].Events)
	}
	sql, _ := appendSQL(nil, false)
	run = append([]int(nil), run...)
	return []step{
		{kind: stepSavepoint, req: -1, run: run, sql: sqlSavepoint},
		{kind: stepAppendRun, req: -1, run: run, sql: sql, args: cols.args(g.boundary), plan: sqlGenericPlans},
		{kind: stepRelease, req: -1, run: run, sql: sqlRelease},
	}
}

// eventColumns are the events of an append statement as the parallel
// arrays it takes ($3…$7, see sqlAppendTail).
//
// The ids go as pgtype.UUID values: a []string for the uuid[] has no
// binary encoding in pgx, which then built an error (formatting every id)
// and encoded the array again as text, for every group. pgtype.UUID has
// both encodings, so the text-format query modes a URL can choose
// (default_query_exec_mode=exec or simple_protocol) work too.
type eventColumns struct {
	ids         []pgtype.UUID
	types, tags []string
	// data are the events' bytes, not copies (see textBytes).
	data     textBytes
	metadata []pgtype.Text
	// textIDs are the ids as given, kept only once one is not a canonical
	// UUID (from a caller that skipped event.Prepare): then they go as
	// text, for PostgreSQL to judge as it would any uuid input, never as a
	// zero UUID.
	textIDs []string
	// size is what the columns take in the binary format: the room the
	// statement's values are given at once (see presized).
	size int
}

func (c *eventColumns) add(events []event.Input) {
	if c.ids == nil {
		// Most appends are one run or one request: room for it at once.
		n := len(events)
		c.ids, c.types = make([]pgtype.UUID, 0, n), make([]string, 0, n)
		c.tags, c.data, c.metadata = make([]string, 0, n), make(textBytes, 0, n), make([]pgtype.Text, 0, n)
	}
	for k := range events {
		in := &events[k]
		id, ok := canonicalUUID(in.ID)
		if !ok && c.textIDs == nil {
			c.textIDs = make([]string, len(c.ids), cap(c.ids))
			for i, prev := range c.ids {
				c.textIDs[i] = uuid.UUID(prev.Bytes).String()
			}
		}
		c.ids = append(c.ids, pgtype.UUID{Bytes: id, Valid: ok})
		if c.textIDs != nil {
			c.textIDs = append(c.textIDs, in.ID)
		}
		c.types = append(c.types, in.Type)
		c.tags = append(c.tags, arrayLiteral(in.Tags))
		c.data = append(c.data, in.Data)
		md := pgtype.Text{}
		if len(in.Metadata) > 0 {
			md = pgtype.Text{String: string(in.Metadata), Valid: true}
		}
		c.metadata = append(c.metadata, md)
		// Each element is its bytes after a 4-byte length; an id is 16
		// bytes in binary, 36 as text.
		c.size += 5*4 + 36 + len(in.Type) + len(c.tags[len(c.tags)-1]) + len(in.Data) + len(in.Metadata)
	}
}

// arrayHeaders is room for the headers of the five arrays of eventColumns
// (20 bytes each in the binary format) and the values after them.
const arrayHeaders = 5*20 + 64

// args are the bind values $1…$7 of the append statement.
func (c *eventColumns) args(boundary string) []any {
	var ids any = presized[[]pgtype.UUID]{c.ids, c.size + arrayHeaders}
	if c.textIDs != nil {
		ids = presized[[]string]{c.textIDs, c.size + arrayHeaders}
	}
	return []any{boundary, int64(len(c.ids)), ids, c.types, c.tags, c.data, c.metadata}
}

// canonicalUUID parses id when it is a UUID in the canonical form
// event.Prepare gives (36 characters, lower case), without formatting it
// back to compare.
func canonicalUUID(id string) ([16]byte, bool) {
	if len(id) != 36 || strings.ContainsAny(id, "ABCDEF") {
		return [16]byte{}, false
	}
	u, err := uuid.Parse(id)
	return u, err == nil
}

// arrayLiteral writes tags as a PostgreSQL array literal, which the append
// statement casts to text[]: every element quoted, a backslash before each
// quote and backslash in it; no tags is {}. Tags hold no NUL (event.Prepare
// refuses it), the one character a literal cannot carry.
func arrayLiteral(tags []string) string {
	if len(tags) == 0 {
		return "{}"
	}
	n := 2
	for _, t := range tags {
		n += len(t) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, t := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for k := 0; k < len(t); k++ {
			if c := t[k]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(t[k])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// decisionSteps are the lookups that decide request i, whose append
// statement wrote nothing.
func (g *groupRun) decisionSteps(i int) []step {
	r := g.reqs[i]
	d := g.decisions[i]
	if d.beyond {
		sql, fargs := beyondMatchSQL(r.Cond)
		args := append([]any{r.Boundary, backend.ClampPosition(r.Cond.After), int64(math.MaxInt64)}, fargs...)
		return []step{{kind: stepBeyond, req: i, sql: sql, args: args, plan: sqlCustomPlans}}
	}
	ids := make([]string, len(r.Events))
	for k := range r.Events {
		ids[k] = r.Events[k].ID
	}
	steps := []step{{kind: stepFindIDs, req: i, sql: sqlFindIDs, args: []any{r.Boundary, ids, d.headAt}, plan: sqlCustomPlans}}
	if r.Cond != nil {
		sql, fargs := firstMatchSQL(r.Cond)
		args := append([]any{r.Boundary, backend.ClampPosition(r.Cond.After), d.headAt}, fargs...)
		steps = append(steps, step{kind: stepFirstMatch, req: i, sql: sql, args: args, plan: sqlCustomPlans})
	}
	return steps
}

// runBatch sends steps as one pipelined batch and reads their results in
// order. It rolls back a request whose append statement failed and returns
// the steps of the next batch: the lookups of requests that wrote nothing,
// and the requests the database skipped after the failure. An
// error fails the whole group (the transaction is lost).
func (g *groupRun) runBatch(ctx context.Context, steps []step) ([]step, error) {
	steps = g.planModes(steps)
	batch := &pgx.Batch{}
	for _, st := range steps {
		batch.Queue(st.sql, st.args...)
	}
	g.s.batches.Add(1)
	br := g.conn.SendBatch(ctx, batch)
	failed := -1
	var failErr error
	var needDecision []int
	for k, st := range steps {
		undecided, err := g.readStep(br, st)
		if err != nil {
			failed, failErr = k, err
			break
		}
		if undecided {
			needDecision = append(needDecision, st.req)
		}
	}
	closeErr := br.Close()
	if failed < 0 && closeErr != nil {
		return nil, g.groupErr("append", closeErr)
	}

	var next []step
	var rerun []int
	if failed >= 0 {
		st := steps[failed]
		var pgErr *pgconn.PgError
		if st.kind != stepAppend && st.kind != stepAppendRun || !errors.As(failErr, &pgErr) {
			// Not the request's own statement, or not a server error (the
			// connection broke): the transaction is lost.
			return nil, g.groupErr(stepName(st.kind), failErr)
		}
		// The database refused this request's statement and aborted its
		// savepoint, nothing else: roll it back and go on. This is a
		// round trip of its own: until it is done the transaction accepts
		// nothing else, not even the parsing of the next batch's
		// statements.
		if _, err := g.conn.Exec(ctx, sqlRollbackToRelease); err != nil {
			return nil, g.groupErr(stepName(stepRollbackTo), err)
		}
		if st.kind == stepAppendRun {
			// One of the run's requests was refused: each goes again
			// alone, before the skipped ones, so the order of the group is
			// kept (after the lookups: a lookup never fails, so none is
			// ever skipped and lost).
			rerun = st.run
		} else if pgErr.Code == "23505" && pgErr.ConstraintName == uniqueIDKey {
			// A stored id: a retry or a conflict, decided by a lookup.
			g.decisions[st.req] = &decision{headAt: g.head, appendErr: failErr}
			needDecision = append(needDecision, st.req)
		} else if pgErr.Code == "23505" && pgErr.ConstraintName == eventsPKey {
			// A position already stored: a row beyond the head, which
			// orisun did not write there. Not a conflict, which would
			// send the client round a re-read and a retry for ever.
			var pos int64
			if err := g.conn.QueryRow(ctx, sqlFirstBeyond, g.boundary, g.head).Scan(&pos); err != nil {
				return nil, g.groupErr("find the row beyond the head", err)
			}
			g.replies[st.req].Err = fmt.Errorf("postgres: %s: %w", g.op(),
				sqlstore.TakenPosition(g.boundary, uint64(pos), uint64(g.head)))
			g.decided[st.req] = true
		} else {
			g.replies[st.req].Err = g.s.translate(g.op(), failErr)
			g.decided[st.req] = true
		}
	}
	for _, i := range needDecision {
		next = append(next, g.decisionSteps(i)...)
	}
	for _, i := range rerun {
		next = append(next, g.requestSteps(i)...)
	}
	if failed >= 0 {
		// The database skipped everything after the failed statement:
		// the other requests of the batch go again, in order.
		for _, st := range steps[failed+1:] {
			switch {
			case st.kind == stepSavepoint && st.run != nil:
				next = append(next, g.runSteps(st.run)...)
			case st.kind == stepSavepoint:
				next = append(next, g.requestSteps(st.req)...)
			}
		}
	}
	return next, nil
}

// planModes returns steps with the plan_cache_mode each statement needs
// (step.plan) set before it, once per change. The mode is set anew in every
// batch: one set inside a savepoint that was rolled back is gone.
func (g *groupRun) planModes(steps []step) []step {
	out := make([]step, 0, len(steps)+2)
	mode := ""
	for _, st := range steps {
		if st.plan != "" && st.plan != mode {
			out = append(out, step{kind: stepPlans, req: -1, sql: st.plan})
			mode = st.plan
		}
		out = append(out, st)
	}
	return out
}

// nearEvents is how many events after a condition's position the
// condition statement walks in position order rather than have PostgreSQL
// plan it with its values (see sqlAppendConditionNear): walking 500 events
// took 0.19 ms, planning 0.06–0.09 ms.
const nearEvents = 256

// near reports whether a condition's position is within nearEvents of the
// boundary's head as this store last saw it (after a group, when a group
// took the head row, or in Heads, which the node reads every poll
// interval). A head another node moved since then makes the walk longer
// (every event it appended meanwhile), never the answer different.
func (g *groupRun) near(after uint64) bool {
	h := uint64(g.knownHead)
	return h > 0 && (after >= h || h-after <= nearEvents)
}

// readStep reads the result of one step. undecided is true for an append
// statement that wrote nothing (the condition matched).
func (g *groupRun) readStep(br pgx.BatchResults, st step) (undecided bool, err error) {
	switch st.kind {
	case stepLock:
		return false, g.readLock(br)
	case stepAppend:
		return g.readAppend(br, st.req)
	case stepAppendRun:
		return false, g.readAppendRun(br, st.run)
	case stepFindIDs:
		return false, g.readStoredIDs(br, st.req)
	case stepFirstMatch:
		return g.readFirstMatch(br, st.req)
	case stepBeyond:
		return false, g.readBeyond(br, st.req)
	case stepCommit:
		return false, g.readCommit(br)
	}
	// BEGIN, SAVEPOINT, RELEASE, SET LOCAL, NOTIFY: only their outcome.
	_, err = br.Exec()
	return false, err
}

// readLock reads the head row the group took (stepLock), and lets the next
// group of the boundary begin once the group holds it.
func (g *groupRun) readLock(br pgx.BatchResults) error {
	err := br.QueryRow().Scan(&g.head, &g.epoch)
	if err == nil {
		// Not when the boundary is missing: an append statement of
		// this group may still create its head row's lock, and a
		// next group must not take it first.
		if f := g.locked; f != nil {
			g.locked = nil
			f()
		}
	}
	if isNoRows(err) {
		// The boundary does not exist, as of this statement. The
		// batch goes on: an append statement after it takes a snapshot
		// of its own and may find the boundary created meanwhile, and
		// then it writes (and the COMMIT in the batch commits it). Each
		// append statement's own result says which it was.
		g.missing = true
		return nil
	}
	g.lockHead = g.head
	if err == nil {
		// The head as locked counts what other nodes appended.
		g.s.noteHead(g.boundary, g.head)
	}
	return err
}

// readAppend reads request i's append statement (stepAppend): the head
// after its events, or no row when the boundary is missing or the
// request's condition matched. A condition that matched wrote nothing
// (undecided): the request's lookups decide it.
func (g *groupRun) readAppend(br pgx.BatchResults, i int) (undecided bool, err error) {
	var head int64
	var epoch string
	err = br.QueryRow().Scan(&head, &epoch)
	if isNoRows(err) && g.missing {
		// No boundary to update (nor any event to match).
		g.answerMissing(i)
		return false, nil
	}
	if isNoRows(err) {
		g.decisions[i] = &decision{headAt: g.head}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	n := int64(len(g.reqs[i].Events))
	g.head = head
	g.replies[i].Res = event.AppendResult{Epoch: epoch, First: uint64(head - n + 1), Last: uint64(head)}
	g.wrote[i] = true
	return false, nil
}

// readAppendRun reads the append statement of a run of requests
// (stepAppendRun): the head after the events of them all, which have
// consecutive positions in the run's order.
func (g *groupRun) readAppendRun(br pgx.BatchResults, run []int) error {
	var head int64
	var epoch string
	err := br.QueryRow().Scan(&head, &epoch)
	if isNoRows(err) && g.missing {
		g.answerMissing(run...)
		return nil
	}
	if err != nil {
		return err
	}
	g.head = head
	first := uint64(head)
	for _, i := range run {
		first -= uint64(len(g.reqs[i].Events))
	}
	for _, i := range run {
		n := uint64(len(g.reqs[i].Events))
		g.replies[i].Res = event.AppendResult{Epoch: epoch, First: first + 1, Last: first + n}
		g.wrote[i] = true
		first += n
	}
	return nil
}

// answerMissing answers requests reqs: their boundary does not exist.
func (g *groupRun) answerMissing(reqs ...int) {
	for _, i := range reqs {
		g.replies[i].Err = notFound(g.op(), g.boundary)
		g.decided[i] = true
	}
}

// readStoredIDs reads which of request i's ids are stored (stepFindIDs). A
// request without a condition has all it needs then, and is decided.
func (g *groupRun) readStoredIDs(br pgx.BatchResults, i int) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	stored, err := scanStored(rows)
	if err != nil {
		return err
	}
	g.decisions[i].stored = stored
	if g.reqs[i].Cond == nil {
		g.decide(i)
	}
	return nil
}

// readFirstMatch reads the first event that matches request i's condition
// (stepFirstMatch, after its stored ids), and decides the request; unless
// nothing explains why its append statement wrote nothing, which leaves it
// undecided for the stepBeyond lookup.
func (g *groupRun) readFirstMatch(br pgx.BatchResults, i int) (undecided bool, err error) {
	d := g.decisions[i]
	err = br.QueryRow().Scan(&d.match)
	switch {
	case isNoRows(err):
	case err != nil:
		return false, err
	default:
		d.matched = true
	}
	if !d.matched && len(d.stored) == 0 && d.appendErr == nil && !d.beyond {
		// The append statement's condition, which is not bounded by the
		// head, matched; its lookup up to the head did not: the match is
		// a row beyond the head.
		d.beyond = true
		return true, nil
	}
	g.decide(i)
	return false, nil
}

// readBeyond reads the first row beyond the head that matches request i's
// condition (stepBeyond), and decides the request.
func (g *groupRun) readBeyond(br pgx.BatchResults, i int) error {
	err := br.QueryRow().Scan(&g.decisions[i].beyondAt)
	if err != nil && !isNoRows(err) {
		return err
	}
	g.decide(i)
	return nil
}

// readCommit reads the COMMIT that rode with a batch (stepCommit). A COMMIT
// of a transaction that failed answers ROLLBACK, not an error: that is
// checked, never assumed.
func (g *groupRun) readCommit(br pgx.BatchResults) error {
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("%w: the transaction was rolled back (%s)", event.ErrUnavailable, tag.String())
	}
	g.open, g.committed = false, true
	return nil
}

// decide answers request i from its lookups: a retry when its ids are
// stored, else a condition failure, else the error of its append
// statement.
func (g *groupRun) decide(i int) {
	r := g.reqs[i]
	d := g.decisions[i]
	op := g.op()
	rep := &g.replies[i]
	g.decided[i] = true
	switch {
	case len(d.stored) > 0:
		// Judged before the condition: a retry of an append that passed
		// its condition is that append, whatever came after it.
		first, last, err := sqlstore.Retry(r.Events, d.stored)
		rep.Res, rep.Err = event.AppendResult{Epoch: g.epoch, First: first, Last: last}, nil
		if err != nil {
			rep.Res, rep.Err = event.AppendResult{}, fmt.Errorf("postgres: %s: %w", op, err)
		}
	case d.appendErr != nil:
		rep.Err = g.s.translate(op, d.appendErr)
	case r.Cond != nil && d.matched:
		rep.Err = &event.ConflictError{Boundary: g.boundary, After: r.Cond.After, Position: uint64(d.match)}
	case d.beyondAt > 0:
		rep.Err = fmt.Errorf("postgres: %s: %w", op, sqlstore.MatchBeyondHead(g.boundary, uint64(d.beyondAt), uint64(d.headAt)))
	default:
		// The append statement wrote nothing, yet nothing explains why.
		rep.Err = fmt.Errorf("postgres: %s: the append wrote nothing and no stored id or condition match explains it", op)
	}
}

func scanStored(rows pgx.Rows) (map[string]event.Event, error) {
	defer rows.Close()
	var found map[string]event.Event
	for rows.Next() {
		var e event.Event
		var pos int64
		var data, md []byte
		if err := rows.Scan(&pos, &e.ID, &e.Type, &e.Tags, &data, &md); err != nil {
			return nil, err
		}
		e.Position = uint64(pos)
		e.Data, e.Metadata = data, md
		if e.Tags == nil {
			e.Tags = []string{}
		}
		if found == nil {
			found = make(map[string]event.Event)
		}
		found[e.ID] = e
	}
	return found, rows.Err()
}

// commit sends the notification and the COMMIT in one round trip. A COMMIT
// of a transaction that failed answers ROLLBACK, not an error: that is
// checked, never assumed.
func (g *groupRun) commit(ctx context.Context) error {
	batch := &pgx.Batch{}
	batch.Queue(sqlNotify, notifyChannel, g.boundary)
	batch.Queue(sqlCommit)
	g.s.batches.Add(1)
	g.commitSent = true
	br := g.conn.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		g.rollback()
		return g.groupErr("notify", err)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The outcome is unknown when the connection broke during the
		// COMMIT: ErrUnavailable, and a retry with the same ids tells.
		return g.groupErr("commit", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("postgres: append to %q: commit: %w: the transaction was rolled back (%s)",
			g.boundary, event.ErrUnavailable, tag.String())
	}
	return nil
}

// rollbackTimeout bounds the ROLLBACK of a failed group; a connection that
// cannot roll back in this time is destroyed instead.
const rollbackTimeout = 5 * time.Second

// rollback ends the transaction; when it cannot, the connection is left
// in it and Release destroys the connection.
func (g *groupRun) rollback() {
	if g.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, _ = g.conn.Exec(ctx, sqlRollback)
}

// fail answers with err every request whose outcome the failure takes:
// those not yet decided; those that wrote, unless the COMMIT already
// succeeded (a lookup after it failed: their events are committed, their
// answers stand); and, when the transaction is lost, the retries decided
// against events this transaction wrote (they are gone with it).
func (g *groupRun) fail(err error) {
	for i := range g.reqs {
		rep := &g.replies[i]
		switch {
		case g.wrote[i] && g.committed:
			continue
		case g.wrote[i], !g.decided[i]:
		case rep.Err == nil && !g.committed && rep.Res.Last > uint64(g.lockHead):
			// A retry of a request earlier in this group.
		default:
			continue
		}
		g.replies[i] = sqlstore.Reply{Err: err}
		g.wrote[i] = false
		g.decided[i] = true
	}
}

// answer sends every taken request its reply.
func (g *groupRun) answer() {
	for i, r := range g.reqs {
		r.Answer(g.replies[i])
	}
}

// op names the group's operation in its errors.
func (g *groupRun) op() string { return fmt.Sprintf("append to %q", g.boundary) }

// groupErr translates an error that lost the group transaction. The
// group's own deadline is the database's slowness, not a caller's choice:
// ErrUnavailable.
func (g *groupRun) groupErr(what string, err error) error {
	op := fmt.Sprintf("append to %q: %s", g.boundary, what)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s: %w: the group transaction did not finish in %s", op, event.ErrUnavailable, groupTimeout)
	}
	return g.s.translate(op, err)
}

func stepName(k stepKind) string {
	switch k {
	case stepBegin:
		return "begin"
	case stepLock:
		return "take the head row"
	case stepSavepoint:
		return "savepoint"
	case stepAppend, stepAppendRun:
		return "insert"
	case stepRelease:
		return "release savepoint"
	case stepRollbackTo:
		return "roll back to savepoint"
	case stepFindIDs:
		return "look up ids"
	case stepFirstMatch:
		return "check condition"
	case stepBeyond:
		return "find the row beyond the head"
	case stepPlans:
		return "set plan_cache_mode"
	case stepNotify:
		return "notify"
	case stepCommit:
		return "commit"
	}
	return "step"
}
