package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// idChunk is how many ids one "id IN (…)" lookup binds; insertChunk is how
// many events one multi-row INSERT binds (8 values each). Both stay far below
// SQLite's limit of bound variables.
const (
	idChunk     = 500
	insertChunk = 100
)

// savepoint isolates one request inside a group transaction.
const savepoint = "orisun_append"

// Append appends events to boundary atomically (all or none), under cond
// when it is not nil. The events must be prepared (event.Prepare). The
// request joins the next group commit; see the package documentation.
//
// A caller whose ctx ends while its request waits gets ctx.Err() and nothing
// of the request is written. Once the writer has started on the request,
// Append waits for and returns its real outcome, so an error from Append
// always means "not written".
func (s *Store) Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	// The operation's name is formatted only for an error: every append
	// passes here.
	op := func() string { return fmt.Sprintf("append to %q", boundary) }
	if err := sqlstore.CheckAppend(ctx, reads{s}, events); err != nil {
		return event.AppendResult{}, fmt.Errorf("sqlite: %s: %w", op(), err)
	}
	r := sqlstore.NewRequest(ctx, boundary, events, cond)
	if err := toWriter(s, ctx, s.requests, r, op); err != nil {
		return event.AppendResult{}, err
	}
	rep, abandoned := r.Wait()
	if abandoned {
		return event.AppendResult{}, fmt.Errorf("sqlite: %s: %w", op(), ctx.Err())
	}
	return rep.Res, rep.Err
}

// toWriter hands v to the writer goroutine on ch, counted among the
// waiting (s.waiting) until the writer takes it. An error: ctx ended or the
// store closes first, and the writer never got v.
func toWriter[T any](s *Store, ctx context.Context, ch chan<- T, v T, op func() string) error {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: %w", op(), ctx.Err())
	case <-s.closing:
		return errClosed(op())
	}
}

// writer is the one goroutine that appends. It takes the first waiting
// request, drains the others that are waiting right now (never sleeping to
// wait for more: a lone append commits at once), and commits them together.
func (s *Store) writer() {
	defer close(s.done)
	var carry *sqlstore.Request // taken from the channel but over the last group's limit
	// expect is how many requests the next group waits for (GroupDelay at
	// most): those of the last group, whose callers usually come back at
	// once, and those that arrived while it committed (commitGroup counts
	// them). A lone caller never waits.
	for {
		var first *sqlstore.Request
		select {
		case <-s.closing:
			if carry != nil {
				carry.Answer(sqlstore.Reply{Err: errClosed(fmt.Sprintf("append to %q", carry.Boundary))})
			}
			return
		default:
		}
		if carry != nil {
			first, carry = carry, nil
		} else {
			select {
			case <-s.closing:
				return
			case first = <-s.requests:
			case l := <-s.lends:
				// An application transaction (Transact) has the
				// writer's connection until it ends.
				<-l.done
				continue
			}
		}
		group := []*sqlstore.Request{first}
		n := len(first.Events)
		if h := s.hold.Load(); h != nil {
			group = s.gatherHeld(h, group)
			s.commitGroup(group)
			continue
		}
	drain:
		for n < s.cfg.GroupMaxEvents {
			select {
			case r := <-s.requests:
				if n+len(r.Events) > s.cfg.GroupMaxEvents {
					carry = r
					break drain
				}
				group = append(group, r)
				n += len(r.Events)
			default:
				break drain
			}
		}
		if s.cfg.GroupDelay > 0 && carry == nil && n < s.cfg.GroupMaxEvents && len(group) < s.expect {
			group, carry = s.gatherFor(s.cfg.GroupDelay, group, n, s.expect)
		}
		s.expect = len(group)
		s.commitGroup(group)
	}
}

// gatherFor waits up to d for more requests to join group (of n events),
// until it holds expect requests or the group size; a request that does
// not fit is returned as carry.
func (s *Store) gatherFor(d time.Duration, group []*sqlstore.Request, n, expect int) ([]*sqlstore.Request, *sqlstore.Request) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for n < s.cfg.GroupMaxEvents && len(group) < expect {
		select {
		case r := <-s.requests:
			if n+len(r.Events) > s.cfg.GroupMaxEvents {
				return group, r
			}
			group = append(group, r)
			n += len(r.Events)
		case <-timer.C:
			return group, nil
		case <-s.closing:
			return group, nil
		}
	}
	return group, nil
}

// groupHold is the test hook that holds a group open: the writer takes
// every request that arrives into the group until release is closed.
type groupHold struct {
	release chan struct{}
	queued  atomic.Int64
}

// holdGroups makes the next group wait for release, gathering every request
// that arrives meanwhile (whatever the group size), in order of arrival.
// queued reports how many the writer holds. For tests: it puts requests in
// one group deterministically, without timing.
func (s *Store) holdGroups() (queued func() int, release func()) {
	h := &groupHold{release: make(chan struct{})}
	s.hold.Store(h)
	var once sync.Once
	return func() int { return int(h.queued.Load()) }, func() { once.Do(func() { close(h.release) }) }
}

func (s *Store) gatherHeld(h *groupHold, group []*sqlstore.Request) []*sqlstore.Request {
	defer s.hold.CompareAndSwap(h, nil)
	h.queued.Store(int64(len(group)))
	for {
		select {
		case r := <-s.requests:
			group = append(group, r)
			h.queued.Add(1)
		case <-h.release:
			return group
		case <-s.closing:
			return group
		}
	}
}

// groupRun is the state of one group transaction: its requests, their
// answers, and the boundaries that got events. The postgres backend has a
// type of the same name and role, with the same steps where they fit
// (take, appendAll, commit, fail, answer).
type groupRun struct {
	s *Store
	// ctx is the group's: the transaction belongs to the group, not to any
	// one caller, and a caller that goes away must not abort the others'
	// commit.
	ctx context.Context
	// group are the requests, in the order they run (byBoundary);
	// replies[k] is the answer of group[k], sent once the group is done to
	// those taken.
	group   []*sqlstore.Request
	replies []sqlstore.Reply
	// now is the commit time of every event of the group.
	now   time.Time
	sqlTx *sql.Tx
	tx    groupTx
	// savepoints is false for a lone request, which needs none: its
	// failure rolls the whole transaction back, which holds nothing else.
	savepoints bool
	// touched are the boundaries that got events.
	touched []string
}

// commitGroup runs the requests of a group in one transaction, each inside
// its own savepoint: a request that fails is rolled back alone and gets its
// own error, the others commit together. One time is taken per group: the
// commit time of all its events.
//
// A request is taken (its caller then waits for the outcome) only when its
// turn in the transaction comes; until then its caller may still give up.
func (s *Store) commitGroup(group []*sqlstore.Request) {
	group = byBoundary(group)
	g := &groupRun{
		s:          s,
		ctx:        context.Background(),
		group:      group,
		savepoints: len(group) > 1,
		replies:    make([]sqlstore.Reply, len(group)),
	}
	s.groups.Add(1)
	s.prepareConditions(g.ctx, group)
	g.now = s.now().UTC()
	sqlTx, err := s.wdb.BeginTx(g.ctx, nil)
	if err != nil {
		g.fail(s.translate("append: begin", err))
		return
	}
	g.sqlTx, g.tx = sqlTx, groupTx{tx: sqlTx, stmts: s.stmts, dyn: s.dyn, use: &s.stmtUse}
	if !g.appendAll() || !g.commit() {
		return // every request of the group was answered
	}
	// Before the answers: the requests that wait now arrived while the
	// group committed. Counting only the group's own, 64 callers settled
	// into two alternating groups.
	s.expect = len(group) + int(s.waiting.Load())
	g.answer()
	s.notify(g.touched)
}

// appendAll runs the requests of the group in their order (byBoundary:
// boundary by boundary, each boundary's in order of arrival), a run of them
// together where it can (runEnd), any other alone. false: the group
// transaction is lost and every request was answered.
func (g *groupRun) appendAll() bool {
	for i := 0; i < len(g.group); {
		j := runEnd(g.group, i)
		// Every request of the run is taken before any of them runs;
		// slots are their places in the group.
		var run []*sqlstore.Request
		var slots []int
		for k := i; k < j; k++ {
			if g.take(k) {
				run = append(run, g.group[k])
				slots = append(slots, k)
			}
		}
		i = j
		if len(run) >= 2 && g.savepoints {
			merged, err := g.appendMerged(run, slots)
			if err != nil {
				g.lose(err)
				return false
			}
			if merged {
				continue
			}
		}
		for _, k := range slots {
			if !g.appendAlone(k) {
				return false
			}
		}
	}
	return true
}

// byBoundary orders the requests of a group by boundary, the boundaries in
// the order each first came, each boundary's requests in their order of
// arrival, so that runEnd finds one run per boundary however the callers
// of several boundaries interleaved (a statement per request was what
// callers spread over 8 boundaries cost, docs/performance.md). Nothing
// between boundaries depends on that order: the group commits as one
// transaction, with one commit time; positions, conditions and stored ids
// are each a boundary's own; and within a boundary the order, and so every
// request's positions and what its condition sees, is what it was. A
// group of one boundary is returned as it is.
func byBoundary(group []*sqlstore.Request) []*sqlstore.Request {
	if !slices.ContainsFunc(group, func(r *sqlstore.Request) bool { return r.Boundary != group[0].Boundary }) {
		return group
	}
	var order []string // the boundaries, as each first came
	each := make(map[string][]*sqlstore.Request)
	for _, r := range group {
		if _, ok := each[r.Boundary]; !ok {
			order = append(order, r.Boundary)
		}
		each[r.Boundary] = append(each[r.Boundary], r)
	}
	out := make([]*sqlstore.Request, 0, len(group))
	for _, b := range order {
		out = append(out, each[b]...)
	}
	return out
}

// runEnd is where the run of requests that begins at group[i] ends.
// Consecutive requests to one boundary without a condition append
// together: one id lookup, one head update and one insert for the run
// (what a statement per request costs is most of a group's work). Anything
// unusual about the run (a stored id, an id twice, a refused value, a
// missing boundary) sends its requests through one at a time instead,
// which gives each its own answer.
func runEnd(group []*sqlstore.Request, i int) int {
	j := i + 1
	if group[i].Cond == nil {
		for j < len(group) && group[j].Cond == nil && group[j].Boundary == group[i].Boundary {
			j++
		}
	}
	return j
}

// take takes group[k] for its turn. false: its caller gave up, or its
// context ended and its reply says so; nothing of it is written.
func (g *groupRun) take(k int) bool {
	r := g.group[k]
	if !r.Take() {
		return false // its caller gave up before its turn
	}
	if err := r.Ctx.Err(); err != nil {
		// Its context ended before its turn: nothing of it is written.
		g.replies[k].Err = fmt.Errorf("sqlite: append to %q: %w", r.Boundary, err)
		return false
	}
	return true
}

// appendMerged appends run, at slots in the group, in one go
// (appendRun). false: the run needs its requests one at a time, and
// nothing of it was written. An error means the group transaction is lost.
func (g *groupRun) appendMerged(run []*sqlstore.Request, slots []int) (bool, error) {
	merged, err := g.s.appendRun(g.ctx, g.tx, run, g.now)
	if err != nil || merged == nil {
		return false, err
	}
	for k, i := range slots {
		g.replies[i].Res = merged[k]
	}
	g.wrote(run[0].Boundary)
	return true, nil
}

// appendAlone runs group[i] alone, inside its own savepoint when the
// group has others. false: the group transaction is lost and every request
// was answered.
func (g *groupRun) appendAlone(i int) bool {
	r := g.group[i]
	op := fmt.Sprintf("append to %q", r.Boundary)
	if g.savepoints {
		if _, err := g.tx.ExecContext(g.ctx, sqlSavepoint); err != nil {
			g.lose(g.s.translate(op+": savepoint", err))
			return false
		}
	}
	res, w, err := g.s.appendOne(g.ctx, g.tx, r, g.now)
	if err != nil {
		g.replies[i].Err = err
		if !g.savepoints {
			return true // rolled back by commit: nothing was written
		}
		// ROLLBACK TO keeps the savepoint open; RELEASE ends it. If
		// SQLite already rolled the whole transaction back (it does on
		// some I/O and memory errors) there is no savepoint left, and no
		// request of the group can commit.
		if _, rbErr := g.tx.ExecContext(g.ctx, sqlRollbackTo); rbErr != nil {
			g.lose(fmt.Errorf("sqlite: %s: %w: the group transaction was lost (%v) after: %v",
				op, event.ErrUnavailable, rbErr, err))
			return false
		}
		return true
	}
	if g.savepoints {
		if _, err := g.tx.ExecContext(g.ctx, sqlRelease); err != nil {
			g.lose(g.s.translate(op+": release savepoint", err))
			return false
		}
	}
	g.replies[i].Res = res
	if w {
		g.wrote(r.Boundary)
	}
	return true
}

// wrote records that boundary b got events.
func (g *groupRun) wrote(b string) {
	if !slices.Contains(g.touched, b) {
		g.touched = append(g.touched, b)
	}
}

// commit commits what the group wrote; a group that wrote nothing (every
// request failed, was a retry or was gone) rolls back: no COMMIT, no fsync.
// false: the COMMIT failed and every request was answered.
func (g *groupRun) commit() bool {
	if len(g.touched) == 0 {
		_ = g.sqlTx.Rollback()
		return true
	}
	if err := g.sqlTx.Commit(); err != nil {
		g.fail(g.s.translate("append: commit", err))
		return false
	}
	return true
}

// lose rolls the group transaction back and answers every request with
// err.
func (g *groupRun) lose(err error) {
	_ = g.sqlTx.Rollback()
	g.fail(err)
}

// fail answers with err every request of the group that is or can still
// be taken: nothing of the group is written.
func (g *groupRun) fail(err error) {
	for _, r := range g.group {
		if r.Taken() || r.Take() {
			r.Answer(sqlstore.Reply{Err: err})
		}
	}
}

// answer sends every request taken its reply. Every request of the group
// is taken or abandoned by now.
func (g *groupRun) answer() {
	for k, r := range g.group {
		if r.Taken() {
			r.Answer(g.replies[k])
		}
	}
}

// appendOne is one request inside the group transaction: idempotent-retry
// check, condition, head row, insert. wrote is false for a retry that
// returned stored positions.
func (s *Store) appendOne(ctx context.Context, tx execer, r *sqlstore.Request, now time.Time) (res event.AppendResult, wrote bool, err error) {
	b := r.Boundary
	op := fmt.Sprintf("append to %q", b)

	// 1. Ids already stored: a retry of an append whose reply was lost
	// (docs/design.md §3). This sees the requests committed earlier in this group
	// too, since they ran in the same transaction.
	stored, err := findIDs(ctx, tx, b, r.Events)
	if err != nil {
		return res, false, s.translate(op+": look up ids", err)
	}
	if len(stored) > 0 {
		res, err := s.retry(ctx, tx, r, stored)
		return res, false, err
	}

	// 2. The condition, under the write lock of this transaction, so it
	// is authoritative at commit (docs/design.md §4).
	if r.Cond != nil {
		pos, found, err := firstMatch(ctx, tx, b, r.Cond)
		if err != nil {
			return res, false, s.translate(op+": check condition", err)
		}
		if found {
			return res, false, s.conflict(ctx, tx, op, r, pos)
		}
	}

	// 3. Take the head row: the positions of this request are the next n.
	n := int64(len(r.Events))
	var head int64
	var epoch string
	err = tx.QueryRowContext(ctx, sqlTakeHead, n, b).Scan(&head, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return res, false, notFound(op, b)
	}
	if err != nil {
		return res, false, s.translate(op+": take head", err)
	}
	first := head - n + 1

	// 4. Insert. Ids were looked up, so the only key an insert can run
	// into is a position: a row stored beyond the head.
	if err := insertEvents(ctx, tx, b, first, now, r.Events); err != nil {
		if isPrimaryKey(err) {
			return res, false, s.takenPosition(ctx, tx, op, b, first, head-n)
		}
		return res, false, s.translate(op+": insert", err)
	}
	return event.AppendResult{Epoch: epoch, First: uint64(first), Last: uint64(head)}, true, nil
}

// appendRun appends a run of requests without conditions to one boundary
// in one go, inside one savepoint: their events get consecutive positions
// in the run's order, as if each had run alone at its turn. It returns nil
// results (and has written nothing) when the run needs the requests one at
// a time: an id already stored (a retry or a conflict), an id twice in the
// run, or any statement that fails (each request then gets its own
// answer). An error means the group transaction is lost.
func (s *Store) appendRun(ctx context.Context, tx execer, run []*sqlstore.Request, now time.Time) ([]event.AppendResult, error) {
	b := run[0].Boundary
	op := fmt.Sprintf("append to %q", b)
	total := 0
	for _, r := range run {
		total += len(r.Events)
	}
	all := make([]event.Input, 0, total)
	seen := make(map[string]bool, total)
	for _, r := range run {
		for k := range r.Events {
			if seen[r.Events[k].ID] {
				return nil, nil // a retry within the group: one at a time
			}
			seen[r.Events[k].ID] = true
		}
		all = append(all, r.Events...)
	}
	if _, err := tx.ExecContext(ctx, sqlSavepoint); err != nil {
		return nil, s.translate(op+": savepoint", err)
	}
	results, ok := s.tryRun(ctx, tx, b, run, all, now)
	if ok {
		if _, err := tx.ExecContext(ctx, sqlRelease); err != nil {
			return nil, s.translate(op+": release savepoint", err)
		}
		s.merged.Add(1)
		return results, nil
	}
	// Undo whatever the run did; the requests go again one at a time.
	if _, err := tx.ExecContext(ctx, sqlRollbackTo); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w: the group transaction was lost: %v", op, event.ErrUnavailable, err)
	}
	return nil, nil
}

// tryRun is the body of appendRun inside its savepoint; false: the run must
// go one request at a time.
func (s *Store) tryRun(ctx context.Context, tx execer, b string, run []*sqlstore.Request, all []event.Input, now time.Time) ([]event.AppendResult, bool) {
	stored, err := findIDs(ctx, tx, b, all)
	if err != nil || len(stored) > 0 {
		return nil, false
	}
	n := int64(len(all))
	var head int64
	var epoch string
	if err := tx.QueryRowContext(ctx, sqlTakeHead, n, b).Scan(&head, &epoch); err != nil {
		return nil, false
	}
	first := head - n + 1
	if err := insertEvents(ctx, tx, b, first, now, all); err != nil {
		return nil, false
	}
	results := make([]event.AppendResult, len(run))
	for i, r := range run {
		k := int64(len(r.Events))
		results[i] = event.AppendResult{Epoch: epoch, First: uint64(first), Last: uint64(first + k - 1)}
		first += k
	}
	return results, true
}

// conflict is the error of request r whose condition matched at pos: a
// conflict, unless pos is beyond the head (a row orisun did not write
// there, and the first match: nothing up to the head matched).
func (s *Store) conflict(ctx context.Context, tx execer, op string, r *sqlstore.Request, pos uint64) error {
	var head int64
	if err := tx.QueryRowContext(ctx, sqlSelectHead, r.Boundary).Scan(&head); err != nil {
		return s.translate(op+": read head", err)
	}
	if pos > uint64(head) {
		return fmt.Errorf("sqlite: %s: %w", op, sqlstore.MatchBeyondHead(r.Boundary, pos, uint64(head)))
	}
	return &event.ConflictError{Boundary: r.Boundary, After: r.Cond.After, Position: pos}
}

// isPrimaryKey reports whether err is a violation of a primary key: in the
// events table, a position already stored.
func isPrimaryKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// takenPosition is the error of an append whose insert from position first
// on ran into a stored row: a row beyond the head (was), which orisun did
// not write there. It names the row's position, read in the same
// transaction. Not a conflict: the client could only try again for ever.
func (s *Store) takenPosition(ctx context.Context, tx execer, op, boundary string, first, was int64) error {
	var pos int64
	if err := tx.QueryRowContext(ctx, sqlFirstFrom, boundary, first).Scan(&pos); err != nil {
		return s.translate(op+": find the row beyond the head", err)
	}
	return fmt.Errorf("sqlite: %s: %w", op, sqlstore.TakenPosition(boundary, uint64(pos), uint64(was)))
}

func notFound(op, boundary string) error {
	return fmt.Errorf("sqlite: %s: %w", op, sqlstore.NotFound(boundary))
}

// retry decides a request some of whose ids are stored (sqlstore.Retry),
// and gives an idempotent retry the stored positions.
func (s *Store) retry(ctx context.Context, tx execer, r *sqlstore.Request, stored map[string]event.Event) (event.AppendResult, error) {
	op := fmt.Sprintf("append to %q", r.Boundary)
	first, last, err := sqlstore.Retry(r.Events, stored)
	if err != nil {
		return event.AppendResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var epoch string
	if err := tx.QueryRowContext(ctx, sqlSelectEpoch, r.Boundary).Scan(&epoch); err != nil {
		return event.AppendResult{}, s.translate(op+": read epoch", err)
	}
	return event.AppendResult{Epoch: epoch, First: first, Last: last}, nil
}

// findIDs returns the stored events of boundary among the ids of events.
func findIDs(ctx context.Context, q execer, boundary string, events []event.Input) (map[string]event.Event, error) {
	var found map[string]event.Event
	for start := 0; start < len(events); start += idChunk {
		chunk := events[start:min(start+idChunk, len(events))]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, boundary)
		for i := range chunk {
			args = append(args, chunk[i].ID)
		}
		rows, err := q.QueryContext(ctx, findIDsSQL.text(len(chunk)), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var e event.Event
			var pos int64
			var tags string
			var data, md []byte
			if err := rows.Scan(&pos, &e.ID, &e.Type, &tags, &data, &md); err != nil {
				_ = rows.Close()
				return nil, err
			}
			e.Position = uint64(pos)
			e.Data, e.Metadata = data, md
			if e.Tags, err = decodeTags(tags); err != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("event %s: %w", e.ID, err)
			}
			if found == nil {
				found = make(map[string]event.Event)
			}
			found[e.ID] = e
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// firstMatch finds the first event after cond.After that matches cond.Query.
func firstMatch(ctx context.Context, q execer, boundary string, cond *event.Condition) (uint64, bool, error) {
	cq, err := rarestTagFirst(ctx, q, boundary, cond.After, forward, &cond.Query)
	if err != nil {
		return 0, false, err
	}
	text, args := firstMatchSQL(cq, boundary, cond.After)
	var pos int64
	err = q.QueryRowContext(ctx, text, args...).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return uint64(pos), true, nil
}

// tagProbeCap bounds the count of one tag's positions that rarestTagFirst
// reads: a tag with more is "common", and any common tag is as good a
// driver as another.
const tagProbeCap = 1000

// rarestTagFirst returns q with the tags of every item with several tags
// reordered so that the tag with the fewest positions on the statement's
// side of pos (counted up to tagProbeCap) comes first and drives the item
// (matchSQL). Driven by a tag every event carries, an item whose other tag
// is rare read every position of the common tag: 1.27 s for one page on
// 300,000 events, against milliseconds when the rare tag drives. q itself
// is not modified.
func rarestTagFirst(ctx context.Context, db execer, boundary string, pos uint64, d direction, q *event.Query) (*event.Query, error) {
	if q == nil {
		return nil, nil
	}
	probe := sqlTagProbeAfter
	if d == backward {
		probe = sqlTagProbeUpTo
	}
	var out *event.Query
	counts := map[string]int64{} // a tag of several items is probed once
	for i, it := range q.Items {
		if len(it.Tags) < 2 {
			continue
		}
		best, bestN := 0, int64(-1)
		for j, tag := range it.Tags {
			n, seen := counts[tag]
			if !seen {
				if err := db.QueryRowContext(ctx, probe, boundary, tag, backend.ClampPosition(pos), tagProbeCap).Scan(&n); err != nil {
					return nil, err
				}
				counts[tag] = n
			}
			if bestN < 0 || n < bestN {
				best, bestN = j, n
			}
			if n == 0 {
				break
			}
		}
		if best == 0 {
			continue
		}
		if out == nil {
			out = &event.Query{Items: append([]event.QueryItem(nil), q.Items...)}
		}
		tags := append([]string{it.Tags[best]}, it.Tags[:best]...)
		out.Items[i].Tags = append(tags, it.Tags[best+1:]...)
	}
	if out == nil {
		return q, nil
	}
	return out, nil
}

// firstMatchSQL is the statement of firstMatch, with its arguments.
func firstMatchSQL(q *event.Query, boundary string, after uint64) (string, []any) {
	return matchStatement(q, forward, sqlFirstAny, sqlFirstMatchPrefix, sqlFirstMatchSuffix, boundary, after, 1)
}

// matchStatement is a statement over the positions that match q
// (matchSQL, in direction d): plain when q matches every event, else the
// compound SELECT between prefix and suffix. Its arguments are ?1 the
// boundary, ?2 the position bound, ?3 how many positions, then q's.
func matchStatement(q *event.Query, d direction, plain, prefix, suffix, boundary string, bound uint64, n int) (string, []any) {
	m, margs, ok := matchSQL(q, d)
	args := append([]any{boundary, backend.ClampPosition(bound), n}, margs...)
	if !ok {
		return plain, args
	}
	return prefix + m + suffix, args
}

// insertEvents inserts events at positions first, first+1, … in multi-row
// INSERTs.
func insertEvents(ctx context.Context, q execer, boundary string, first int64, now time.Time, events []event.Input) error {
	t := now.UnixNano()
	for start := 0; start < len(events); start += insertChunk {
		chunk := events[start:min(start+insertChunk, len(events))]
		args := make([]any, 0, len(chunk)*8)
		for i := range chunk {
			in := &chunk[i]
			tags, err := encodeTags(in.Tags)
			if err != nil {
				return fmt.Errorf("event %s: %w", in.ID, err)
			}
			var md any
			if len(in.Metadata) > 0 {
				md = string(in.Metadata)
			}
			args = append(args, boundary, first+int64(start+i), in.ID, in.Type, t, tags, string(in.Data), md)
		}
		if _, err := q.ExecContext(ctx, insertSQL.text(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// encodeTags stores tags as a JSON array; no tags is "[]", never "null", so
// json_each always sees an array.
func encodeTags(tags []string) (string, error) {
	if len(tags) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(tags)
	if err != nil {
		return "", fmt.Errorf("encode tags: %w", err)
	}
	return string(b), nil
}

func decodeTags(s string) ([]string, error) {
	tags := []string{}
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, fmt.Errorf("decode tags %q: %w", s, err)
	}
	if tags == nil {
		tags = []string{}
	}
	return tags, nil
}

// maxArms is the most arms of the compound SELECT of one query that
// matchSQL splits a type-only item's types into; SQLite's limit is 500.
const maxArms = 256

// The order of a query's positions: forward after ?2 (read, condition) or
// backward from ?2 down (read-latest).
type direction bool

const (
	forward  direction = false
	backward direction = true
)

// matchSQL returns a compound SELECT of one column, p: for each item of q,
// the first ?3 positions of the boundary ?1 that match the item, after ?2
// (forward) or up to ?2 from the top (backward); and its bind values, ?4
// on. The caller orders the union and keeps its first ?3. ok is false for
// the empty query and a query with an empty item: they match every event,
// and the plain statements serve them.
//
// Every item is bounded by the index that drives it, so a page, a latest or
// a condition reads about as many index entries as it returns, however
// common or rare a tag or type is (docs/queries.md has the measurements):
//   - an item with tags walks the tag index (event_tags) for its first tag
//     in position order, from the bound, and checks its other tags and its
//     types by primary key, row by row, until it has ?3 positions;
//   - an item with types only is one arm per type (type IN (…) over all of
//     them when a query would have more than maxArms arms), which the
//     planner serves from the (boundary, type, position) index or by
//     walking the primary key from the bound.
//
// An IN (SELECT …) list of all the positions of a tag or type would be
// materialised whole before the LIMIT applies (reading every position of a
// common tag for one page); that is what this shape avoids.
func matchSQL(q *event.Query, d direction) (sqlText string, args []any, ok bool) {
	if q == nil || len(q.Items) == 0 {
		return "", nil, false
	}
	for _, it := range q.Items {
		if len(it.Types) == 0 && len(it.Tags) == 0 {
			return "", nil, false
		}
	}
	cmp, order := " > ?2", ""
	if d == backward {
		cmp, order = " <= ?2", " DESC"
	}
	param := func(v any) string {
		args = append(args, v)
		return "?" + strconv.Itoa(3+len(args))
	}
	typeList := func(types []string) string {
		ps := make([]string, len(types))
		for i, t := range types {
			ps[i] = param(t)
		}
		return strings.Join(ps, ", ")
	}
	// A type-only item with several types is one arm per type, each in
	// the type index's position order, unless that would make more arms
	// than maxArms (SQLite allows 500 in one compound SELECT): type IN (…)
	// over several types cannot be read in position order, and the planner
	// would read every matching entry past the bound before the LIMIT.
	arms := 0
	for _, it := range q.Items {
		if len(it.Tags) == 0 {
			arms += len(it.Types)
		} else {
			arms++
		}
	}
	splitTypes := arms <= maxArms
	var sb strings.Builder
	first := true
	arm := func() {
		if !first {
			sb.WriteString(" UNION ")
		}
		first = false
		sb.WriteString("SELECT p FROM (")
	}
	for _, it := range q.Items {
		if len(it.Tags) == 0 {
			groups := [][]string{it.Types}
			if splitTypes {
				groups = make([][]string, len(it.Types))
				for i, t := range it.Types {
					groups[i] = []string{t}
				}
			}
			for _, types := range groups {
				arm()
				sb.WriteString("SELECT y.position AS p FROM events y WHERE y.boundary = ?1 AND y.position" + cmp +
					" AND y.type IN (" + typeList(types) + ") ORDER BY y.position" + order + " LIMIT ?3)")
			}
			continue
		}
		arm()
		sb.WriteString("SELECT t.position AS p FROM event_tags t")
		if len(it.Types) > 0 {
			// Each tagged position's type, by primary key. "+ 0": with a
			// plain y.position = t.position SQLite carried t's position
			// range over to y and searched y by that range, for every row.
			sb.WriteString(" CROSS JOIN events y ON y.boundary = ?1 AND y.position = t.position + 0")
		}
		sb.WriteString(" WHERE t.boundary = ?1 AND t.tag = " + param(it.Tags[0]) + " AND t.position" + cmp)
		for j, tag := range it.Tags[1:] {
			if slices.Contains(it.Tags[:j+1], tag) {
				continue // a tag given twice is tested once
			}
			sb.WriteString(" AND EXISTS (SELECT 1 FROM event_tags u WHERE u.boundary = ?1 AND u.tag = " + param(tag) +
				" AND u.position = t.position)")
		}
		if len(it.Types) > 0 {
			sb.WriteString(" AND y.type IN (" + typeList(it.Types) + ")")
		}
		sb.WriteString(" ORDER BY t.position" + order + " LIMIT ?3)")
	}
	return sb.String(), args, true
}
