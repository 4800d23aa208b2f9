package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
	"github.com/orisun-io/orisun/internal/startstop"
	"github.com/orisun-io/orisun/stream"
)

// Backend is what the service serves: the operations of the embedding
// Node, and nothing of its internals.
type Backend interface {
	Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error)
	Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
	// ReadBackward returns up to limit events below position before (0:
	// from the head), newest first, matching q.
	ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
	// ReadLatest returns the last event matching q and the head, from one
	// snapshot (docs/design.md §4).
	ReadLatest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error)
	// Boundary returns one boundary with its head (ErrNotFound if none).
	Boundary(ctx context.Context, name string) (event.Boundary, error)
	Boundaries(ctx context.Context) ([]event.Boundary, error)
	CreateBoundary(ctx context.Context, name string) (event.Boundary, error)
	// Status returns the status document (docs/design.md §8), encoded as JSON.
	Status(ctx context.Context) (any, error)
}

// Config of the service.
type Config struct {
	// RequestTimeout bounds the work of one request; default 30s.
	RequestTimeout time.Duration
	// MaxInFlight is the most requests handled at once; default 256. More
	// wait on NATS's subscription buffer.
	MaxInFlight int
	// Metadata is shown by `nats micro info` (for example the node id).
	Metadata map[string]string
	Logger   *slog.Logger
	// Refused, when set, is told of an append or read request (op
	// "append" or "read"; read-latest is a read) that the service refused
	// before handing it to the backend: a body that does not decode, a bad
	// subject or limit, a read past the head. The backend counts the
	// requests it gets; together they count every request (the node's
	// metrics). boundary is the subject's last token, whatever it is. It
	// must not block.
	Refused func(op, boundary string, err error)
}

// Service is the API service. Start and Stop are safe to call twice,
// concurrently, and in any order (startstop.Base); the handlers run on
// goroutines of the service's own, which Stop waits for.
type Service struct {
	cfg    Config
	be     Backend
	nc     *nats.Conn
	svc    micro.Service
	log    *slog.Logger
	life   startstop.Base
	ctx    context.Context // the requests'; ends after Stop's grace
	cancel context.CancelFunc
	sem    chan struct{}
	bad    *badRowLog
	// work hands a request to an idle request goroutine (see idle);
	// quit, closed at Stop, ends the idle ones.
	work     chan func()
	quit     chan struct{}
	quitOnce sync.Once
}

// workerIdle is how long a request goroutine waits for the next request
// before it ends.
const workerIdle = time.Second

// New returns the service of be on nc, not started. The service owns nc
// from here on: Stop closes it, even before Start.
func New(nc *nats.Conn, be Backend, cfg Config) *Service {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, be: be, nc: nc, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxInFlight), bad: &badRowLog{},
		work: make(chan func()), quit: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Start adds the micro service "orisun" on nc and serves be: New, then
// Start. The service owns nc from here on: Stop closes it, and so does a
// Start that fails.
func Start(nc *nats.Conn, be Backend, cfg Config) (*Service, error) {
	s := New(nc, be, cfg)
	if err := s.Start(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// Start adds the micro service "orisun" on the service's connection and
// serves its backend. A second Start does nothing; a Start after Stop, or
// after a Start that failed (which closed the connection), is an error.
func (s *Service) Start(ctx context.Context) error {
	err := s.life.Start(ctx, s.serve, s.shutdown)
	if errors.Is(err, startstop.ErrStopped) {
		return fmt.Errorf("api: %w", err)
	}
	return err
}

func (s *Service) serve(context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        api.ServiceName,
		Version:     api.ServiceVersion,
		Description: "orisun event store: append, read, read-latest, boundaries, status (docs/protocol.md)",
		Metadata:    s.cfg.Metadata,
		// Every node's service answers in one queue group: a request
		// reaches one of them.
		QueueGroup: "orisun",
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Warn("api service error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return fmt.Errorf("api: add service: %w", err)
	}
	s.svc = svc
	g := svc.AddGroup(api.SubjectPrefix)
	endpoints := []struct {
		name, subject string
		h             func(context.Context, micro.Request) (any, error)
	}{
		{"append", "append.*", s.append},
		{"read", "read.*", s.read},
		{"latest", "latest.*", s.latest},
		{"boundaries", "boundaries", s.boundaries},
		{"create_boundary", "boundaries.create", s.createBoundary},
		{"status", "status", s.status},
	}
	for _, e := range endpoints {
		if err := g.AddEndpoint(e.name, s.handler(e.h), micro.WithEndpointSubject(e.subject)); err != nil {
			return fmt.Errorf("api: add endpoint %s: %w", e.name, err)
		}
	}
	// Subscriptions reach the server asynchronously: flush, so that a
	// request sent once Start returned finds its responder.
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("api: flush subscriptions: %w", err)
	}
	return nil
}

// Stop stops taking requests, lets the requests in flight finish (their
// context is cancelled after a grace period), and closes the connection.
// Every Stop returns the first one's error.
func (s *Service) Stop() error { return s.life.Stop(s.shutdown) }

func (s *Service) shutdown() error {
	var err error
	if s.svc != nil {
		err = s.svc.Stop()
	}
	grace := time.AfterFunc(5*time.Second, s.cancel)
	s.quitOnce.Do(func() { close(s.quit) })
	s.life.Wait()
	grace.Stop()
	s.cancel()
	s.nc.Close()
	if err != nil {
		return fmt.Errorf("api: stop service: %w", err)
	}
	return nil
}

// handler runs h on a request goroutine (an idle one, see idle, or a new
// one) and replies with its result or its error. The reply is published on the request's reply subject with
// the service's connection, not through micro.Request: micro reads the
// request's state once the handler returns, and a goroutine answering later
// would race with it. (So `nats micro stats` counts requests, not errors.)
func (s *Service) handler(h func(context.Context, micro.Request) (any, error)) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		r := &reply{nc: s.nc, log: s.log, bad: s.bad, subject: req.Subject(), reply: req.Reply()}
		if unsafeReply(r.reply) {
			// A reply subject inside orisun's or JetStream's subjects would
			// make this service publish there on the caller's behalf (into
			// an event stream, say). On the embedded server the API's user
			// may not publish there anyway; on an external NATS this check
			// is what stops it. The request is not served.
			s.log.Warn("api request refused: its reply subject is not an inbox", "subject", r.subject, "reply", r.reply)
			return
		}
		if s.life.State() == startstop.Stopped {
			r.error(errStopping())
			return
		}
		// Waiting here holds up the endpoint's delivery: the back-pressure
		// of a full house.
		s.sem <- struct{}{}
		task := func() { defer func() { <-s.sem }(); s.handle(h, req, r) }
		select {
		case s.work <- task: // an idle request goroutine took it
			return
		default:
		}
		if !s.life.Go(func() { task(); s.idle() }) {
			<-s.sem
			r.error(errStopping())
		}
	})
}

// idle keeps a request goroutine for the next requests, with the stack it
// has grown: a goroutine per request grew a new stack for each
// (runtime.copystack, 2% of the node's CPU under 64 callers,
// docs/performance.md "The users' path"). It returns after workerIdle
// without a request, and at Stop. At most MaxInFlight goroutines run
// requests; idle ones hold no slot.
func (s *Service) idle() {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case task := <-s.work:
			task()
			t.Reset(workerIdle)
		case <-t.C:
			return
		case <-s.quit:
			return
		}
	}
}

// errStopping answers a request the stopping service does not serve.
func errStopping() error {
	return fmt.Errorf("the orisun node is stopping; send the request again: %w", event.ErrUnavailable)
}

// handle runs h for req and replies with its result or its error.
func (s *Service) handle(h func(context.Context, micro.Request) (any, error), req micro.Request, r *reply) {
	defer func() {
		// A bug in a handler answers "internal" and leaves the
		// server running.
		if p := recover(); p != nil {
			s.log.Error("api handler panicked", "subject", r.subject, "panic", p)
			r.error(fmt.Errorf("internal error while handling %s", r.subject))
		}
	}()
	// The service's own deadline (serviceutil.WithTimeout): a store that
	// does not answer within it failed, as opposed to a caller in process
	// that chose a deadline of its own.
	ctx, cancel := serviceutil.WithTimeout(s.ctx, s.cfg.RequestTimeout)
	defer cancel()
	res, err := h(ctx, req)
	if err != nil {
		if ctx.Err() != nil && s.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w: not answered within %s: %w", errDeadline, s.cfg.RequestTimeout, err)
		}
		r.error(err)
		return
	}
	var body []byte
	switch v := res.(type) {
	case []byte:
		body = v
	default:
		body, err = json.Marshal(v)
		if err != nil {
			r.error(fmt.Errorf("encode reply: %w", err))
			return
		}
	}
	r.send(&nats.Msg{Data: body})
}

// unsafeReply reports whether a reply subject lies inside subjects that a
// reply must never be published to.
func unsafeReply(subject string) bool {
	for _, p := range []string{"orisun.", "$JS.", "$KV.", "$O.", "$SYS.", "$SRV.", "$MQTT.", "_ORISUN_INBOX."} {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

// reply answers one request.
type reply struct {
	nc             *nats.Conn
	log            *slog.Logger
	bad            *badRowLog
	subject, reply string
}

func (r *reply) send(m *nats.Msg) {
	if r.reply == "" {
		return // a publish, not a request: nobody waits for an answer
	}
	m.Subject = r.reply
	if err := r.nc.PublishMsg(m); err != nil {
		r.log.Warn("api reply not sent", "subject", r.subject, "err", err)
	}
}

// error answers with the micro error headers and the JSON error body.
func (r *reply) error(err error) {
	code := api.CodeOf(err)
	// The client gets the detail it can act on; the whole error, with the
	// operation and the store's words, stays in the node's log.
	msg := clientMessage(err, code)
	var bad *event.CorruptError
	isBad := code == api.CodeCorrupt && errors.As(err, &bad)
	// Not once per request what stays the same for many: a store that
	// fails is logged by the node once per change of state (its store
	// watch, docs/operations.md "When the store fails"), and a bad row
	// once, by the first request that meets it ("A bad row"); the
	// requests themselves at DEBUG. The counters count every one.
	switch {
	case code == api.CodeInternal, code == api.CodeCorrupt && (!isBad || r.bad.first(bad)):
		r.log.Error("api request failed", "subject", r.subject, "code", code, "err", err)
	case code == api.CodeUnavailable, code == api.CodeCorrupt:
		r.log.Debug("api request failed", "subject", r.subject, "code", code, "err", err)
	default:
		r.log.Debug("api request refused", "subject", r.subject, "code", code, "err", err)
	}
	detail := api.ErrorDetail{Code: code, Message: msg}
	var ce *event.ConflictError
	if code == api.CodeConflict && errors.As(err, &ce) && ce.Position > 0 {
		p := ce.Position
		detail.Position = &p
	}
	if isBad {
		p := bad.Position
		detail.Position, detail.Column = &p, bad.Column
	}
	body, _ := json.Marshal(api.ErrorBody{Error: detail})
	m := &nats.Msg{Header: nats.Header{}, Data: body}
	// A header is one line: a message with a line break would end it.
	m.Header.Set(api.ErrorHeader, strings.NewReplacer("\r", " ", "\n", " ").Replace(msg))
	m.Header.Set(api.ErrorCodeHeader, strconv.Itoa(api.NumericCode(code)))
	r.send(m)
}

// badRowLog remembers the bad rows the service logged (boundary, position
// and column), so that each is logged at ERROR once, by the first request
// that meets it: a client that reads or retries into a bad row must not
// flood the log. It holds at most maxBadRows rows and then starts again,
// so a row may be logged again after that many others.
type badRowLog struct {
	mu   sync.Mutex
	seen map[badRowKey]struct{}
}

type badRowKey struct {
	boundary string
	position uint64
	column   string
}

const maxBadRows = 1024

// first reports whether bad is met for the first time, and remembers it.
func (l *badRowLog) first(bad *event.CorruptError) bool {
	k := badRowKey{bad.Boundary, bad.Position, bad.Column}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[k]; ok {
		return false
	}
	if l.seen == nil || len(l.seen) >= maxBadRows {
		l.seen = make(map[badRowKey]struct{})
	}
	l.seen[k] = struct{}{}
	return true
}

// decode reads a JSON request body into v. An empty body is {}. Unknown
// fields, duplicate keys in the envelope (keyRule) and trailing data are
// refused, naming them; request names the request in the message ("the
// append request").
func decode(data []byte, v any, request, fields string, rule keyRule) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return fmt.Errorf("%w: request body is not valid JSON: %v (at byte %d)", event.ErrInvalid, syn, syn.Offset)
		case errors.As(err, &typ) && typ.Field == "":
			return fmt.Errorf("%w: request body: a JSON %s, not an object; send a JSON object", event.ErrInvalid, typ.Value)
		case errors.As(err, &typ):
			return fmt.Errorf("%w: %s: a JSON %s cannot be a %s", event.ErrInvalid, typ.Field, typ.Value, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("%w: request: %s; the fields are %s", event.ErrInvalid,
				strings.TrimPrefix(err.Error(), "json: "), fields)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("%w: request body is not valid JSON: it ends too early", event.ErrInvalid)
		default:
			return fmt.Errorf("%w: request body: %v", event.ErrInvalid, err)
		}
	}
	if dec.More() {
		return fmt.Errorf("%w: request body holds more than one JSON value", event.ErrInvalid)
	}
	// The body decoded: it is one JSON value with known fields only. Look
	// for a key given twice, which the decoder let the last one win.
	if err := duplicateKey(data, rule, request); err != nil {
		var dk *dupKeyError
		if errors.As(err, &dk) {
			return fmt.Errorf("%w: %w", event.ErrInvalid, err)
		}
		return fmt.Errorf("%w: %s: %v", event.ErrInvalid, request, err)
	}
	return nil
}

// boundaryOf returns the boundary named by the subject's last token.
func boundaryOf(req micro.Request) (string, error) {
	subj := req.Subject()
	name := subj[strings.LastIndexByte(subj, '.')+1:]
	if err := event.ValidateBoundaryName(name); err != nil {
		return "", fmt.Errorf("subject %s: %w", subj, err)
	}
	return name, nil
}

// refused tells Config.Refused of a request refused before the backend.
func (s *Service) refused(op string, req micro.Request, err error) {
	if s.cfg.Refused != nil {
		subj := req.Subject()
		s.cfg.Refused(op, subj[strings.LastIndexByte(subj, '.')+1:], err)
	}
}

func (s *Service) append(ctx context.Context, req micro.Request) (any, error) {
	b, err := boundaryOf(req)
	if err == nil {
		var r api.AppendRequest
		r, err = decodeAppend(req.Data())
		if err == nil {
			return s.be.Append(ctx, b, r.Events, r.Condition)
		}
	}
	s.refused("append", req, err)
	return nil, err
}

func (s *Service) read(ctx context.Context, req micro.Request) (res any, err error) {
	reached := false
	defer func() {
		if err != nil && !reached {
			s.refused("read", req, err)
		}
	}()
	b, err := boundaryOf(req)
	if err != nil {
		return nil, err
	}
	var r api.ReadRequest
	if err := decode(req.Data(), &r, "the read request", "after, limit, query, backwards and before", checkAll); err != nil {
		return nil, err
	}
	limit := api.DefaultReadLimit
	if r.Limit != nil {
		limit = *r.Limit
	}
	switch {
	case limit < 1:
		return nil, fmt.Errorf("%w: limit: %d is below the minimum 1", event.ErrInvalid, limit)
	case limit > api.MaxReadLimit:
		return nil, fmt.Errorf("%w: limit: %d is above the maximum %d", event.ErrInvalid, limit, api.MaxReadLimit)
	}
	if err := event.ValidateQuery(r.Query); err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if err := checkDirection(&r); err != nil {
		return nil, err
	}
	bd, err := s.be.Boundary(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("read boundary %q: %w", b, err)
	}
	if r.Backwards {
		reached = true
		return s.readBackward(ctx, b, bd, limit, &r)
	}
	if r.After > bd.Head {
		return nil, fmt.Errorf("%w: after: %d is past the head %d of boundary %q; a reader cannot be ahead of the log "+
			"(a saved position of another store or epoch?)", event.ErrInvalid, r.After, bd.Head, b)
	}
	reached = true
	epoch, events, err := s.be.Read(ctx, b, r.After, limit, r.Query)
	if err != nil {
		return nil, fmt.Errorf("read boundary %q after %d: %w", b, r.After, err)
	}
	// The head was read before the events: report at least the last
	// position returned, so that head never trails the events.
	head := bd.Head
	if epoch != bd.Epoch {
		// The boundary was reset between the two reads: that head is of
		// the old epoch and says nothing of these events (a reader told
		// head 500 with ten events of the new epoch would ask for 11 and
		// be refused as a bad reply). The new epoch's head instead, and
		// the check above against it.
		var same bool
		if head, same, err = s.headOfEpoch(ctx, b, epoch); err != nil {
			return nil, err
		}
		if same && r.After > head {
			return nil, fmt.Errorf("%w: after: %d is past the head %d of boundary %q, which was reset (epoch %s) while it was read; "+
				"a reader cannot be ahead of the log (a saved position of the old epoch?)", event.ErrInvalid, r.After, head, b, epoch)
		}
	}
	if n := len(events); n > 0 && events[n-1].Position > head {
		head = events[n-1].Position
	}
	return encodeRead(epoch, head, events, int(s.nc.MaxPayload()))
}

// headOfEpoch is boundary b's head if b is in epoch now (same); else 0,
// since it was reset again: the reply's head is then the highest position
// returned, and nothing is refused for a head of yet another epoch.
func (s *Service) headOfEpoch(ctx context.Context, b, epoch string) (head uint64, same bool, err error) {
	bd, err := s.be.Boundary(ctx, b)
	if err != nil {
		return 0, false, fmt.Errorf("read boundary %q: %w", b, err)
	}
	if bd.Epoch != epoch {
		return 0, false, nil
	}
	return bd.Head, true, nil
}

// checkDirection refuses a read request that mixes the two directions: a
// backward read starts below before and has no after, a forward read has no
// before.
func checkDirection(r *api.ReadRequest) error {
	switch {
	case r.Backwards && r.After != 0:
		return fmt.Errorf("%w: after: %d is for a forward read; a backward read (\"backwards\": true) reads below \"before\" "+
			"(0: from the head) and takes no after", event.ErrInvalid, r.After)
	case !r.Backwards && r.Before != 0:
		return fmt.Errorf("%w: before: %d is for a backward read; send \"backwards\": true with it, or \"after\" for a forward read",
			event.ErrInvalid, r.Before)
	}
	return nil
}

// readBackward answers a backward read (r.Backwards) of boundary b, whose
// was bd a moment ago: the events below r.Before, newest first, as many as
// fit the reply (encodeRead drops the oldest of the page).
func (s *Service) readBackward(ctx context.Context, b string, bd event.Boundary, limit int, r *api.ReadRequest) (any, error) {
	epoch, events, err := s.be.ReadBackward(ctx, b, r.Before, limit, r.Query)
	if err != nil {
		return nil, fmt.Errorf("read boundary %q backward before %d: %w", b, r.Before, err)
	}
	// The head was read before the events: report at least the highest
	// position returned, so that head never trails the events. A head of
	// another epoch (the boundary reset in between) says nothing of these
	// events: the highest of them is then the head (0 without any), which
	// the client's checks of a backward read accept, where the old epoch's
	// head would make a correct reply look like one that skipped positions.
	head := bd.Head
	if epoch != bd.Epoch {
		head = 0
	}
	if len(events) > 0 && events[0].Position > head {
		head = events[0].Position
	}
	return encodeRead(epoch, head, events, int(s.nc.MaxPayload()))
}

// encodeRead writes the read reply with the stream's event encoder (the
// body of a stream message and an event of a read are the same bytes), and
// stops before the reply would exceed the NATS max payload. At least one
// event is always sent: each fits one stream message, checked at append.
func encodeRead(epoch string, head uint64, events []event.Event, maxBytes int) ([]byte, error) {
	b := make([]byte, 0, 4096)
	b = append(b, `{"epoch":`...)
	eb, _ := json.Marshal(epoch)
	b = append(b, eb...)
	b = append(b, `,"head":`...)
	b = strconv.AppendUint(b, head, 10)
	b = append(b, `,"events":[`...)
	for i := range events {
		body, err := stream.Body(&events[i])
		if err != nil {
			return nil, fmt.Errorf("encode event at position %d: %w", events[i].Position, err)
		}
		if i > 0 && len(b)+len(body)+3 > maxBytes {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, body...)
	}
	return append(b, "]}"...), nil
}

func (s *Service) latest(ctx context.Context, req micro.Request) (any, error) {
	b, err := boundaryOf(req)
	var r api.LatestRequest
	if err == nil {
		err = decode(req.Data(), &r, "the read-latest request", "query", checkAll)
	}
	if err == nil {
		if qerr := event.ValidateQuery(r.Query); qerr != nil {
			err = fmt.Errorf("query: %w", qerr)
		}
	}
	if err != nil {
		s.refused("read", req, err)
		return nil, err
	}
	l, err := s.be.ReadLatest(ctx, b, r.Query)
	if err != nil {
		return nil, fmt.Errorf("read the latest of boundary %q: %w", b, err)
	}
	return encodeLatest(&l)
}

// encodeLatest writes the read-latest reply; its event is encoded as a
// read's and a stream message's are (stream.Body).
func encodeLatest(l *event.Latest) ([]byte, error) {
	b := make([]byte, 0, 1024)
	b = append(b, `{"epoch":`...)
	eb, _ := json.Marshal(l.Epoch)
	b = append(b, eb...)
	b = append(b, `,"head":`...)
	b = strconv.AppendUint(b, l.Head, 10)
	b = append(b, `,"event":`...)
	if l.Event == nil {
		b = append(b, "null"...)
	} else {
		body, err := stream.Body(l.Event)
		if err != nil {
			return nil, fmt.Errorf("encode event at position %d: %w", l.Event.Position, err)
		}
		b = append(b, body...)
	}
	return append(b, '}'), nil
}

func (s *Service) boundaries(ctx context.Context, req micro.Request) (any, error) {
	var r struct{}
	if err := decode(req.Data(), &r, "the request", "none (send {})", checkAll); err != nil {
		return nil, err
	}
	bs, err := s.be.Boundaries(ctx)
	if err != nil {
		return nil, fmt.Errorf("list boundaries: %w", err)
	}
	if bs == nil {
		bs = []event.Boundary{}
	}
	return api.BoundariesReply{Boundaries: bs}, nil
}

func (s *Service) createBoundary(ctx context.Context, req micro.Request) (any, error) {
	var r api.CreateBoundaryRequest
	if err := decode(req.Data(), &r, "the create-boundary request", "name", checkAll); err != nil {
		return nil, err
	}
	if err := event.ValidateBoundaryName(r.Name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	return s.be.CreateBoundary(ctx, r.Name)
}

func (s *Service) status(ctx context.Context, req micro.Request) (any, error) {
	var r struct{}
	if err := decode(req.Data(), &r, "the request", "none (send {})", checkAll); err != nil {
		return nil, err
	}
	return s.be.Status(ctx)
}

// errDeadline marks a request that was not answered within RequestTimeout.
// To errors.Is it is event.ErrUnavailable, so its code is "unavailable":
// the request may succeed when sent again.
var errDeadline error = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string        { return "request deadline" }
func (deadlineError) Is(target error) bool { return target == event.ErrUnavailable }
