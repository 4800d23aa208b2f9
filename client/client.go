package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/status"
)

// Client talks to orisun over NATS. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration
	log     *slog.Logger

	// The live hint of every subscription of this client comes from one
	// status request a second at most (see live).
	liveMu  sync.Mutex
	liveAt  time.Time
	leading map[string]bool

	// The epoch of each boundary in the last reply that carried it
	// (sameEpoch).
	epochMu sync.Mutex
	epochs  map[string]string

	// The requests waiting for an answer, by subject: a permissions
	// violation on a subject ends them at once (refused).
	deniedMu sync.Mutex
	waiting  map[string]map[*pending]bool
}

// pending is a request waiting for its answer.
type pending struct {
	cancel context.CancelFunc
	denied bool // guarded by deniedMu
}

type options struct {
	nats    []nats.Option
	timeout time.Duration
	log     *slog.Logger
}

// Option configures Connect.
type Option func(*options)

// Name is the connection name shown by NATS monitoring.
func Name(name string) Option { return NATSOptions(nats.Name(name)) }

// UserInfo authenticates with a user and password.
func UserInfo(user, password string) Option { return NATSOptions(nats.UserInfo(user, password)) }

// Token authenticates with a token.
func Token(token string) Option { return NATSOptions(nats.Token(token)) }

// RootCAs trusts the CA certificates of these PEM files for TLS (for when
// the server gets TLS).
func RootCAs(files ...string) Option { return NATSOptions(nats.RootCAs(files...)) }

// NATSOptions passes options to nats.Connect as they are: credentials,
// TLS, handlers. They come after the client's defaults, so they win.
func NATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.nats = append(o.nats, opts...) }
}

// Timeout bounds each request whose context has no deadline; default 10s.
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Logger receives the client's warnings (reconnections, retried reads).
func Logger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Connect connects to the NATS server of an orisun node. The connection
// reconnects forever: subscriptions ride out relay restarts.
func Connect(url string, opts ...Option) (*Client, error) {
	o := options{timeout: 10 * time.Second, log: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&o)
	}
	log := o.log
	all := append([]nats.Option{
		nats.Name("orisun-client"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to NATS", "url", nc.ConnectedUrl()) }),
	}, o.nats...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("orisun client: connect to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("orisun client: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, timeout: o.timeout, log: log, waiting: map[string]map[*pending]bool{}}
	// The server drops a request the client may not send and says so
	// asynchronously: end the request then, instead of at its timeout.
	// The handler given in NATSOptions, if any, still gets every error.
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		c.refused(err)
		if prev != nil {
			prev(nc, sub, err)
		} else {
			log.Warn("NATS error", "err", err)
		}
	})
	return c, nil
}

// refused ends the requests waiting on the subject of a publish
// permissions violation.
func (c *Client) refused(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	// `Permissions Violation for Publish to "subject"`
	_, rest, ok := strings.Cut(err.Error(), `Publish to "`)
	if !ok {
		return
	}
	subject, _, _ := strings.Cut(rest, `"`)
	c.deniedMu.Lock()
	defer c.deniedMu.Unlock()
	for p := range c.waiting[subject] {
		p.denied = true
		p.cancel()
	}
	delete(c.waiting, subject)
}

// watch registers a request on subject, whose context cancel ends; done
// unregisters it and reports whether the server refused the request.
func (c *Client) watch(subject string, cancel context.CancelFunc) (done func() (denied bool)) {
	p := &pending{cancel: cancel}
	c.deniedMu.Lock()
	if c.waiting[subject] == nil {
		c.waiting[subject] = map[*pending]bool{}
	}
	c.waiting[subject][p] = true
	c.deniedMu.Unlock()
	return func() bool {
		c.deniedMu.Lock()
		defer c.deniedMu.Unlock()
		delete(c.waiting[subject], p)
		if len(c.waiting[subject]) == 0 {
			delete(c.waiting, subject)
		}
		return p.denied
	}
}

// Close closes the connection; subscriptions on it end.
func (c *Client) Close() { c.nc.Close() }

// Conn is the NATS connection, for anything the client does not wrap.
func (c *Client) Conn() *nats.Conn { return c.nc }

// request sends a request and decodes the reply into v. An error reply
// becomes an *api.Error (errors.Is matches event.ErrInvalid, ErrNotFound,
// …); a transport failure that may pass (no responders, a timeout, a
// reconnection) wraps event.ErrUnavailable.
func (c *Client) request(ctx context.Context, subject string, req, v any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request for %s: %w", subject, err)
	}
	return c.send(ctx, subject, body, v)
}

// send sends the encoded request body and decodes the reply into v, as
// request does.
func (c *Client) send(ctx context.Context, subject string, body []byte, v any) error {
	// A request over the server's max payload never reaches orisun: NATS
	// refuses it, and its "maximum payload exceeded" would read like a
	// transport failure. Say what is too large and what the limit is.
	if max := c.nc.MaxPayload(); max > 0 && int64(len(body)) > max {
		return fmt.Errorf("%w: %s: the request is %d bytes, the server's max payload is %d: send fewer or smaller events per append (one event must fit on its own)",
			event.ErrTooLarge, subject, len(body), max)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := c.watch(subject, cancel)
	msg, err := c.nc.RequestWithContext(rctx, subject, body)
	if denied := done(); err != nil && denied {
		return fmt.Errorf("%s: the NATS server refused the request: these credentials may not send it (%w)", subject, nats.ErrPermissionViolation)
	}
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("%s: %w: %w", subject, event.ErrClosed, err)
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("%s: no orisun service answers (is the relay running?): %w: %w", subject, event.ErrUnavailable, err)
		case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
			return ctx.Err()
		default:
			return fmt.Errorf("%s: %w: %w", subject, event.ErrUnavailable, err)
		}
	}
	if apiErr, isErr := api.DecodeError(msg.Header.Get(api.ErrorCodeHeader), msg.Header.Get(api.ErrorHeader), msg.Data); isErr {
		return apiErr
	}
	if err := decodeReply(msg.Data, v); err != nil {
		return fmt.Errorf("%s: reply is not the expected JSON: %w", subject, err)
	}
	return nil
}

// Append appends events atomically; cond (optional) fails the append with
// a conflict when an event matching its query exists after its position:
// errors.Is(err, event.ErrConflict), and errors.As(err, &ce) finds an
// *event.ConflictError with the first matching position.
// Sending the same events again (same ids) after a lost reply returns the
// same positions and writes nothing. A reply that does not fit the request
// (not len(events) consecutive positions, an epoch that is no boundary's or
// not the one this client saw for the boundary before) is an error that
// errors.Is matches with ErrBadReply, never a result: send the events again
// with the same ids to learn where they are. An append refused because a
// row stored beyond the boundary's head holds a position it would take is
// event.ErrCorrupt (an *event.CorruptError naming that position), not a
// conflict: it fails until an operator repairs the row.
func (c *Client) Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	var res event.AppendResult
	// The boundary is a token of the request's subject: a name with a '.'
	// or a space makes another subject or none, the request finds no
	// responder and the error would read "is the relay running?". Name
	// the bad name instead (Read and ReadLatest likewise).
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return res, err
	}
	subject := api.AppendSubject(boundary)
	body, err := encodeAppend(events, cond)
	if err != nil {
		return res, err
	}
	err = c.send(ctx, subject, body, &res)
	if err == nil {
		if err := c.checkAppend(subject, boundary, events, &res); err != nil {
			return event.AppendResult{}, err
		}
		return res, nil
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Conflict != nil && cond != nil {
		apiErr.Conflict.Boundary = boundary
		apiErr.Conflict.After = cond.After
	}
	return res, badRow(err, boundary)
}

// badRow fills the boundary into the *event.CorruptError of a corrupt
// reply: a stored row of the boundary, at the reply's position, does not
// fit the log (docs/protocol.md, "Errors").
func badRow(err error, boundary string) error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Corrupt != nil {
		apiErr.Corrupt.Boundary = boundary
	}
	return err
}

// ReadLatest returns the last event of the boundary matching q (nil or no
// items: any event; Event is nil when none matches) and the boundary's
// head, read in one snapshot: the context of a decision. Append the
// decision under a condition with the same query and After: Head (an empty
// event.Query when q is nil); the append fails with an error that
// errors.As finds an *event.ConflictError in when an event matching q came
// in meanwhile. Read again and decide again. A reply that cannot be the
// answer (see ErrBadReply) is an error.
func (c *Client) ReadLatest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error) {
	var res api.LatestReply
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return res, err
	}
	subject := api.LatestSubject(boundary)
	if err := c.request(ctx, subject, api.LatestRequest{Query: q}, &res); err != nil {
		return res, badRow(err, boundary)
	}
	if err := c.checkLatest(subject, boundary, q, &res); err != nil {
		return api.LatestReply{}, err
	}
	return res, nil
}

// Read returns up to limit events after position after (1 ≤ limit ≤
// 10,000), matching q when it is not nil. The reply may hold fewer events
// than limit though more exist (a page must fit one NATS message): the head
// is reached when the last position equals Head. A reply that cannot be the
// answer (see ErrBadReply: events out of order, not after after, beyond
// the head, of another boundary or epoch, not matching q, a position
// missing from a read without a query) is an error. A read that reaches a
// stored row that does not fit the log (changed behind orisun's back) fails
// with an error that errors.Is matches with event.ErrCorrupt, and
// errors.As finds an *event.CorruptError in naming the row's position and
// column; reading again fails the same way until the row is repaired.
func (c *Client) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (api.ReadReply, error) {
	var res api.ReadReply
	if err := event.ValidateBoundaryName(boundary); err != nil {
		return res, err
	}
	subject := api.ReadSubject(boundary)
	if err := c.request(ctx, subject, api.ReadRequest{After: after, Limit: &limit, Query: q}, &res); err != nil {
		return res, badRow(err, boundary)
	}
	if err := c.checkRead(subject, boundary, after, limit, q, &res); err != nil {
		return api.ReadReply{}, err
	}
	return res, nil
}

// Boundaries lists the boundaries with their epochs and heads.
func (c *Client) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	var res api.BoundariesReply
	if err := c.request(ctx, api.SubjectBoundaries, struct{}{}, &res); err != nil {
		return nil, err
	}
	for i := range res.Boundaries {
		if err := checkBoundary(api.SubjectBoundaries, "", &res.Boundaries[i]); err != nil {
			return nil, err
		}
	}
	return res.Boundaries, nil
}

// CreateBoundary creates a boundary, or returns the existing one.
func (c *Client) CreateBoundary(ctx context.Context, name string) (event.Boundary, error) {
	var res event.Boundary
	if err := c.request(ctx, api.SubjectCreateBoundary, api.CreateBoundaryRequest{Name: name}, &res); err != nil {
		return res, err
	}
	if err := checkBoundary(api.SubjectCreateBoundary, name, &res); err != nil {
		return event.Boundary{}, err
	}
	if err := c.sameEpoch(api.SubjectCreateBoundary, name, res.Epoch); err != nil {
		return event.Boundary{}, err
	}
	return res, nil
}

// Status returns the status of the node that answered.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var res Status
	err := c.request(ctx, api.SubjectStatus, struct{}{}, &res)
	return res, err
}

// Status is the status document of docs/design.md §8, as the API sends it: the
// same type the node reports (package status holds types only).
type (
	Status         = status.Status
	BoundaryStatus = status.BoundaryStatus
)
