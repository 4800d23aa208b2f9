// Package catchup delivers a boundary's events to a handler exactly once each,
// in position order: first from the store (catch up), then from the
// boundary's JetStream stream (live), and back to the store whenever the
// stream cannot continue exactly where the handler is (docs/design.md §7, I5).
// Applications subscribe through package orisun (Node.Subscribe) or package
// client, which both run it. It is orisun's machinery, not for import by
// applications: its API may change without notice, and such a change is not
// a breaking change of orisun.
//
// The state machine of one subscription, with next the position the handler
// needs:
//
//	catching up: read pages from the store after next-1 and deliver them.
//	             When a page comes back short (the head was reached) and the
//	             stream holds next (first ≤ next) in the subscription's
//	             epoch, go live; otherwise keep reading the store.
//	live:        a consumer of its own from stream sequence next (any
//	             failure of it: back to catching up). A message
//	             with position < next is dropped (already delivered); one
//	             with position > next is a gap (eviction, a restart, a slow
//	             handler): back to catching up from next. A message of
//	             another epoch ends the subscription with ErrEpochChanged.
//
// The handler's return is the acknowledgement: the next event is not
// delivered before it returns, and a handler error ends the subscription.
// So does a stored row that does not fit the log (event.ErrCorrupt: data
// that is not JSON, a position missing or beyond the head), once every
// event before it was delivered: the error names the row, and nothing is
// skipped past it.
// Nothing here depends on a clock: no grace window, no time comparison.
package catchup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/stream"
)

// Reader reads committed events in position order (the store, or a client
// reading through the API).
type Reader interface {
	Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
}

// Config is what subscriptions run on.
type Config struct {
	Store Reader
	JS    jetstream.JetStream
	// PageSize is the number of events read from the store per page.
	PageSize int
	// RetryInterval is the wait before trying the stream again when it
	// cannot serve yet (missing, other epoch, or the live consumer failed).
	RetryInterval time.Duration
	// Live reports whether the stream is being fed: the boundary's
	// publisher leads and is not stalled. When it returns false the
	// subscription reads the store instead of waiting on a stream nobody
	// publishes to. Nil means always.
	Live   func() bool
	Logger *slog.Logger
}

// Subscribe delivers the boundary's events after position after to h until
// ctx ends (it returns ctx's error), h fails (its error, wrapped), or the
// epoch changes (ErrEpochChanged).
func Subscribe(ctx context.Context, cfg Config, boundary string, after uint64, h event.Handler, opts event.SubscribeOptions) error {
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return err
	}
	if h == nil {
		// Otherwise a nil-function panic at the first event, after the
		// subscription had looked fine.
		return fmt.Errorf("%w: subscription to %q: the handler is nil", event.ErrInvalid, boundary)
	}
	if after > math.MaxInt64 {
		// No store holds such a position; and after+1, the next position,
		// would wrap round to 0 at the largest uint64.
		return fmt.Errorf("%w: boundary %q has no position %d to resume after: the start position is beyond the head "+
			"(positions end at %d)", event.ErrInvalid, boundary, after, uint64(math.MaxInt64))
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1000
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &sub{cfg: cfg, opts: opts, boundary: boundary, next: after + 1, epoch: opts.Epoch, h: h,
		log: cfg.Logger.With("boundary", boundary)}
	return s.run(ctx)
}

type sub struct {
	cfg      Config
	opts     event.SubscribeOptions
	boundary string
	epoch    string
	next     uint64
	h        event.Handler
	log      *slog.Logger
	// refused is whether JetStream refused the last live consumer (it is
	// logged once, and the pause before the next try grows whatever the
	// store delivers meanwhile).
	refused bool
}

func (s *sub) run(ctx context.Context) error {
	if err := s.checkStart(ctx); err != nil {
		return err
	}
	// pause grows while the stream keeps failing and the store has nothing
	// new, so a stream that cannot serve is not hammered; a delivery from
	// the store resets it (the stream fell behind, the store caught up:
	// live again at once), unless JetStream refused the consumer. A
	// refusal (every consumer slot taken) lasts whatever the appends do,
	// and each try costs a stream info, a consumer creation and a
	// fall-back: the pause grows, and the store is read every
	// RetryInterval meanwhile so that the events keep coming.
	pause := time.Duration(0)
	for {
		before := s.next
		if err := s.catchUp(ctx); err != nil {
			return err
		}
		if s.next != before && !s.refused {
			pause = 0
		}
		if pause > 0 {
			if err := s.wait(ctx, pause); err != nil {
				return err
			}
		}
		live, err := s.canGoLive(ctx)
		if err != nil {
			return err
		}
		if !live {
			if !serviceutil.Sleep(ctx, s.cfg.RetryInterval) {
				return ctx.Err()
			}
			continue
		}
		if s.opts.OnCaughtUp != nil {
			s.opts.OnCaughtUp(s.next)
		}
		reason, err := s.live(ctx)
		if err != nil {
			return err
		}
		pause = min(max(2*pause, s.cfg.RetryInterval), 5*time.Second)
		s.log.Debug("subscription fell behind", "next", s.next, "reason", reason)
		if s.opts.OnFellBehind != nil {
			s.opts.OnFellBehind(s.next, reason)
		}
	}
}

// wait waits d before the next live try; after a refused consumer it reads
// the store every RetryInterval meanwhile.
func (s *sub) wait(ctx context.Context, d time.Duration) error {
	if !s.refused {
		if !serviceutil.Sleep(ctx, d) {
			return ctx.Err()
		}
		return nil
	}
	for end := time.Now().Add(d); ; {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		if !serviceutil.Sleep(ctx, min(left, s.cfg.RetryInterval)) {
			return ctx.Err()
		}
		if err := s.catchUp(ctx); err != nil {
			return err
		}
	}
}

// checkStart refuses a start position beyond the head: in the same epoch
// that means the store went back in time (a restore), and the positions the
// consumer already processed would be filled with other events.
func (s *sub) checkStart(ctx context.Context) error {
	if s.next == 1 {
		return nil
	}
	events, err := s.read(ctx, s.next-2, 1)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("%w: boundary %q has no position %d to resume after: the start position is beyond the head "+
			"(was the store restored from an older backup?)", event.ErrInvalid, s.boundary, s.next-1)
	}
	return nil
}

// catchUp delivers from the store until a page comes back short.
func (s *sub) catchUp(ctx context.Context) error {
	for {
		events, err := s.read(ctx, s.next-1, s.cfg.PageSize)
		for i := range events {
			// With a bad row's error, the good events before it (a
			// store's read hands them over, backend.Reader).
			if derr := s.deliver(ctx, &events[i]); derr != nil {
				return derr
			}
		}
		if err != nil {
			return s.upToBadRow(ctx, err)
		}
		if len(events) < s.cfg.PageSize {
			return nil
		}
	}
}

// upToBadRow ends the subscription at a stored row that does not fit the
// log (event.ErrCorrupt, err): the events before it are delivered first,
// so that the handler has processed everything up to the bad row when the
// subscription ends with err, which names it. Any other err is returned as
// it is.
//
// A reader that does not hand over the good events with the error (the
// API's read, for a client) is read again, in pages that stop short of
// the bad row. A row beyond the head, past a gap, has fewer good events
// before it than positions: the longest page that reads without the error
// is searched for, by halves (a dozen reads at most per page, once, as
// the subscription ends).
func (s *sub) upToBadRow(ctx context.Context, err error) error {
	var bad *event.CorruptError
	if !errors.As(err, &bad) {
		return err
	}
	for s.next < bad.Position {
		events := s.beforeBadRow(ctx, bad.Position)
		if len(events) == 0 {
			return err
		}
		for i := range events {
			if events[i].Position >= bad.Position {
				return err
			}
			if derr := s.deliver(ctx, &events[i]); derr != nil {
				return derr
			}
		}
	}
	return err
}

// beforeBadRow reads the longest page from next on, of at most PageSize
// events, that reads without an error (the bad row at pos is after it);
// none when no page does.
func (s *sub) beforeBadRow(ctx context.Context, pos uint64) []event.Event {
	n := int(min(pos-s.next, uint64(s.cfg.PageSize)))
	events, err := s.read(ctx, s.next-1, n)
	if err == nil {
		return events
	}
	if !errors.Is(err, event.ErrCorrupt) {
		return nil
	}
	// ok: a page of this many reads; the page of n does not.
	var good []event.Event
	for ok, fails := 0, n; fails-ok > 1; {
		mid := ok + (fails-ok)/2
		events, err := s.read(ctx, s.next-1, mid)
		switch {
		case err == nil:
			good, ok = events, mid
		case errors.Is(err, event.ErrCorrupt):
			fails = mid
		default:
			return good
		}
	}
	return good
}

// read reads a page from the store after position after, retrying failures
// that may pass, and checks the page's epoch against the subscription's
// (taking it on the first read when the subscription did not name one). A
// stored row that does not fit the log (event.ErrCorrupt) is not retried:
// it ends the subscription, naming the row, until an operator repairs it;
// the good events the store read before it are returned with that error.
func (s *sub) read(ctx context.Context, after uint64, limit int) ([]event.Event, error) {
	for {
		epoch, events, err := s.cfg.Store.Read(ctx, s.boundary, after, limit, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, event.ErrCorrupt) && len(events) > 0 && (s.epoch == "" || epoch == s.epoch) &&
				events[0].Position == after+1 {
				// The good events before the bad row, with its error.
				if s.epoch == "" {
					s.epoch = epoch
				}
				return events, fmt.Errorf("read boundary %q after %d: %w", s.boundary, after, err)
			}
			if errors.Is(err, event.ErrNotFound) || errors.Is(err, event.ErrInvalid) || errors.Is(err, event.ErrCorrupt) {
				return nil, fmt.Errorf("read boundary %q after %d: %w", s.boundary, after, err)
			}
			s.log.Warn("store read failed; retrying", "after", after, "err", err)
			if !serviceutil.Sleep(ctx, s.cfg.RetryInterval) {
				return nil, ctx.Err()
			}
			continue
		}
		if s.epoch == "" {
			s.epoch = epoch
		}
		if epoch != s.epoch {
			return nil, fmt.Errorf("boundary %q is in epoch %s, the subscription's position %d is of epoch %s: %w",
				s.boundary, epoch, s.next-1, s.epoch, event.ErrEpochChanged)
		}
		return events, nil
	}
}

// deliver hands the event at next to the handler.
func (s *sub) deliver(ctx context.Context, e *event.Event) error {
	if e.Position != s.next {
		return fmt.Errorf("boundary %q: expected position %d, got %d: the source broke position order", s.boundary, s.next, e.Position)
	}
	if err := s.h(ctx, *e); err != nil {
		return fmt.Errorf("handler at position %d of boundary %q: %w", e.Position, s.boundary, err)
	}
	s.next++
	return nil
}

// canGoLive reports whether the stream holds next in the subscription's
// epoch (first ≤ next).
func (s *sub) canGoLive(ctx context.Context) (bool, error) {
	if s.cfg.JS == nil || s.cfg.Live != nil && !s.cfg.Live() {
		return false, nil
	}
	st, err := s.cfg.JS.Stream(ctx, stream.Name(s.boundary))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil
	}
	info := st.CachedInfo()
	if stream.Epoch(&info.Config) != s.epoch {
		return false, nil
	}
	first := info.State.FirstSeq
	if info.State.Msgs == 0 {
		first = info.State.LastSeq + 1
	}
	return first <= s.next, nil
}

// silentConsumer is how long a live consumer may deliver nothing while the
// stream holds the position it waits for.
const silentConsumer = 3 * time.Second

// streamHolds reports whether the boundary's stream holds position pos (its
// last sequence is at or past it). Any doubt is false: staying live is the
// default, and the stream check is a liveness aid only.
func (s *sub) streamHolds(ctx context.Context, pos uint64) bool {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.cfg.JS.Stream(sctx, stream.Name(s.boundary))
	if err != nil {
		return false
	}
	info := st.CachedInfo()
	return info.State.LastSeq >= pos && info.State.FirstSeq <= pos
}

// storeHolds reports whether the store has committed position pos. Any
// doubt is false, as for streamHolds; a row there that does not fit the log
// (event.ErrCorrupt) is the error that ends the subscription: nobody will
// publish it.
func (s *sub) storeHolds(ctx context.Context, pos uint64) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	epoch, events, err := s.cfg.Store.Read(rctx, s.boundary, pos-1, 1, nil)
	if errors.Is(err, event.ErrCorrupt) && ctx.Err() == nil {
		return false, fmt.Errorf("read boundary %q after %d: %w", s.boundary, pos-1, err)
	}
	return err == nil && epoch == s.epoch && len(events) == 1 && events[0].Position == pos, nil
}

// consumerInactive is how long the server keeps a live consumer that
// nobody pulls from: the consumer of a subscription whose process died.
// A live subscription pulls all the time, and deletes its consumer when it
// ends.
const consumerInactive = time.Minute

// consumerRequest bounds the JetStream API requests that create and delete
// a live consumer.
const consumerRequest = 5 * time.Second

// newConsumer creates the live consumer: ephemeral, in memory, no acks,
// from stream sequence next.
//
// It is a plain consumer, not jetstream's ordered consumer. The ordered
// consumer recreates itself after a reconnect or a deleted consumer, and
// retries that without end while Next waits, deaf to every context: a
// subscription whose NATS server restarted without the stream hung for
// good, and so did the Stop of the program that ran it. Here anything that
// goes wrong with the consumer ends live, and run reads the store and makes
// a new consumer, as it does for a gap; the recovery is orisun's, bounded
// by ctx.
func (s *sub) newConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, consumerRequest)
	defer cancel()
	return s.cfg.JS.CreateConsumer(cctx, stream.Name(s.boundary), jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       s.next,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: consumerInactive,
	})
}

// deleteConsumer removes the live consumer when live ends, so that
// subscriptions that come and go do not pile up consumers on the stream
// until consumerInactive. Best effort: with the connection down the server
// forgets it by itself.
func (s *sub) deleteConsumer(ctx context.Context, cons jetstream.Consumer) {
	if !s.cfg.JS.Conn().IsConnected() {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = s.cfg.JS.DeleteConsumer(dctx, stream.Name(s.boundary), cons.CachedInfo().Name)
}

// logRefusal says, by its cause, why JetStream refused the live consumer.
func (s *sub) logRefusal(err error) {
	switch {
	case errors.Is(err, jetstream.ErrMaximumConsumersLimit):
		// One application can take every slot (docs/security.md,
		// "Limits").
		s.log.Warn("the boundary's stream has no consumer slot free for the subscription (its consumers, or the account's, "+
			"are at JetStream's limit): reading the store meanwhile; nats consumer ls shows who holds them",
			"stream", stream.Name(s.boundary), "err", err)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// Deleted after canGoLive saw it: the publisher creates it
		// again.
		s.log.Info("the boundary's stream is gone: reading the store until it is back", "stream", stream.Name(s.boundary))
	default:
		s.log.Warn("JetStream refused the subscription's consumer: reading the store meanwhile",
			"stream", stream.Name(s.boundary), "err", err)
	}
}

// live consumes the stream from next. It returns the reason it went back
// to the store, or an error that ends the subscription.
func (s *sub) live(ctx context.Context) (string, error) {
	cons, err := s.newConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var refused *jetstream.APIError
		if errors.As(err, &refused) {
			// JetStream refuses the consumer: the subscription reads the
			// store and tries again, and says why once until a consumer
			// is made.
			if !s.refused {
				s.logRefusal(err)
			}
			s.refused = true
		}
		return "live consumer not created: " + err.Error(), nil
	}
	s.refused = false
	defer s.deleteConsumer(ctx, cons)
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.PageSize))
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "live consumer failed: " + err.Error(), nil
	}
	defer it.Stop()
	quietSince := time.Now()
	for {
		// Wake at least every second to ask whether the stream is still
		// fed: a publisher that stalled or lost its lease leaves this
		// stream behind the store, and the store must take over.
		nctx, cancel := context.WithTimeout(ctx, time.Second)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if s.cfg.Live != nil && !s.cfg.Live() {
					return "the boundary's publisher is not leading here: reading the store", nil
				}
				// The stream holds next, yet nothing arrived for a while:
				// the consumer is stuck (its stream was recreated under
				// it, say). The store never is.
				if time.Since(quietSince) >= silentConsumer {
					if s.streamHolds(ctx, s.next) {
						return fmt.Sprintf("live consumer silent for %s while the stream holds position %d: reading the store",
							time.Since(quietSince).Round(time.Second), s.next), nil
					}
					// The stream lacks next, but the store has it: the
					// stream is not being fed, whatever the hint says (a
					// leader on another node that is paused by the
					// stream's limits, or stalled and not yet stepped
					// down). The store serves it meanwhile.
					held, err := s.storeHolds(ctx, s.next)
					if err != nil {
						return "", err
					}
					if held {
						return fmt.Sprintf("the stream is behind the store: position %d is committed but was not published for %s: reading the store",
							s.next, time.Since(quietSince).Round(time.Second)), nil
					}
					// Idle, not stuck: look again in a while, so that an
					// idle subscription costs one stream-info request per
					// silentConsumer, not per second.
					quietSince = time.Now()
				}
				continue
			}
			return "live consumer failed: " + err.Error(), nil
		}
		quietSince = time.Now()
		h := msg.Headers()
		md, _ := msg.Metadata()
		if h.Get(stream.HeaderPosition) == "" || h.Get(stream.HeaderEpoch) == "" {
			// Not a message of orisun's publisher (someone published
			// into the stream): never deliver it, read the store instead.
			seq := uint64(0)
			if md != nil {
				seq = md.Sequence.Stream
			}
			return "foreign message without orisun headers at stream sequence " + strconv.FormatUint(seq, 10) +
				" on " + msg.Subject(), nil
		}
		if ep := h.Get(stream.HeaderEpoch); ep != s.epoch {
			// The store decides: a changed epoch ends the subscription
			// there (ErrEpochChanged); a stray message is just skipped.
			return "stream message of epoch " + ep + ", not the subscription's: reading the store", nil
		}
		pos, err := strconv.ParseUint(h.Get(stream.HeaderPosition), 10, 64)
		if err != nil || md == nil || md.Sequence.Stream != pos {
			return "stream message on " + msg.Subject() + " is not at the sequence of its position: reading the store", nil
		}
		switch {
		case pos < s.next:
			continue // already delivered (a republish after a restart)
		case pos > s.next:
			return "gap: the stream went from position " + strconv.FormatUint(s.next-1, 10) + " to " +
				strconv.FormatUint(pos, 10), nil
		}
		e, err := stream.Decode(msg.Subject(), h, msg.Data())
		if err == nil && e.Boundary != s.boundary {
			err = fmt.Errorf("body of boundary %q", e.Boundary)
		}
		if err != nil {
			// orisun's publisher writes nothing that fails here: someone
			// else put this message into the stream with orisun's
			// headers. Like any foreign message it is never delivered;
			// the store has the event of this position.
			return fmt.Sprintf("stream message at sequence %d is not an orisun event (%v): reading the store", pos, err), nil
		}
		if err := s.deliver(ctx, &e); err != nil {
			return "", err
		}
		// A slow handler is not a silent consumer.
		quietSince = time.Now()
	}
}
