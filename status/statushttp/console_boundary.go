package statushttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/history"
)

// ConsoleSource is what the console's boundary pages read of the node:
// the history its sampler keeps in memory, and the events (Read,
// ReadLatest and Subscribe of the node, with their validation).
type ConsoleSource interface {
	// History returns the boundary's seconds after Unix second after;
	// false when the node does not run the boundary.
	History(boundary string, after int64) (history.Series, bool)
	Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
	// ReadBackward returns up to limit events below position before (0:
	// from the head), newest first.
	ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
	ReadLatest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error)
	Subscribe(ctx context.Context, boundary string, after uint64, h event.Handler, opts event.SubscribeOptions) error
}

// PageSize is how many events a page of the console's log holds.
const PageSize = 50

// maxEpochLen bounds the epoch a tail's request names.
const maxEpochLen = 256

// DefaultMaxTails is how many live tails a node's listener serves at once:
// each is a subscription of the node (a consumer, a goroutine or two).
const DefaultMaxTails = 16

// DefaultTailWriteTimeout bounds one write of a live tail: a client that
// stopped reading ends the tail and its subscription within it (once the
// connection's buffers are full, the write fails). A client gone without
// closing its connection is UserTimeout's.
const DefaultTailWriteTimeout = 10 * time.Second

// UserTimeout is how long the listener's connections (Linux) let data
// they sent stay unacknowledged before the kernel aborts them: a client
// gone without closing (asleep, off the network) fails the next keep-alive
// of its tail, which then ends with its subscription and frees its slot,
// within about UserTimeout plus the keep-alive's 15 s, not after TCP's
// retransmissions (about 15 minutes).
const UserTimeout = 30 * time.Second

// boundaryHandlers adds one boundary's page, its history, its log and its
// live tail.
func (s *Server) boundaryHandlers(mux *http.ServeMux, files fs.FS) {
	page, err := fs.ReadFile(files, "boundary.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	mux.Handle("GET /console/boundary/{name}", consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})))
	mux.Handle("GET /console/history/{name}", consoleHeaders(http.HandlerFunc(s.history)))
	mux.Handle("GET /console/events/{name}", consoleHeaders(s.eventPage(http.HandlerFunc(s.events))))
	mux.Handle("GET /console/events/{name}/tail", consoleHeaders(s.eventPage(http.HandlerFunc(s.tail))))
	// A page that needs the console's login sends the browser here: the
	// browser asks for the credentials (basic auth) and, given, sends them
	// with the page's later requests under /console/.
	mux.Handle("GET /console/login", consoleHeaders(s.eventPage(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := r.URL.Query().Get("next")
		if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "//") {
			next = "/console/"
		}
		http.Redirect(w, r, next, http.StatusFound)
	}))))
}

// source is the console's source, or an error answer when there is none.
func (s *Server) source(w http.ResponseWriter) ConsoleSource {
	if s.opts.Events == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "this listener has no boundary pages"})
	}
	return s.opts.Events
}

// history answers GET /console/history/{name}?after=S: the boundary's
// samples after Unix second S (all 900 kept without it).
func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		a, err := strconv.ParseInt(v, 10, 64)
		if err != nil || a < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("after: %q is not a Unix second", v)})
			return
		}
		after = a
	}
	name := r.PathValue("name")
	h, ok := src.History(name, after)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("boundary %q does not run on this node", name)})
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// logPage is one page of the console's log.
type logPage struct {
	Epoch string `json:"epoch"`
	// Head is the boundary's head when the page was read: at least the
	// highest position of the page.
	Head uint64 `json:"head"`
	// Order is "newest" (highest position first) or "from" (lowest
	// first).
	Order  string       `json:"order"`
	Events []shownEvent `json:"events"`
	// More is true when events may follow the page in its order: the next
	// page starts after its last event (newest first: below it).
	More bool `json:"more"`
	// Error is why the page could not be read when the log itself is
	// damaged (a stored row that does not fit it, event.ErrCorrupt,
	// naming its position): the operator's answer, not a failed request.
	Error string `json:"error,omitempty"`
}

// events answers GET /console/events/{name}: a page of PageSize events
// matching the filter (types=…&tags=…, one parameter each: an event of one of the types, any
// without types, that carries every tag, as one item of the API's query).
// With from=P, from position P on, lowest first; else newest first, below
// position before=P (from the head without it).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	name := r.PathValue("name")
	v := r.URL.Query()
	q, err := queryOf(v)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	position := func(field string, least uint64) (uint64, bool) {
		f := v.Get(field)
		if f == "" {
			return 0, true
		}
		p, err := strconv.ParseUint(f, 10, 64)
		if err != nil || p < least {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("%s: %q is not a position (%d or more)", field, f, least)})
			return 0, false
		}
		return p, true
	}
	from, ok := position("from", 1)
	if !ok {
		return
	}
	before, ok := position("before", 0)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
	defer cancel()
	latest, err := src.ReadLatest(ctx, name, nil)
	if err != nil {
		writeEventError(w, err)
		return
	}
	page := logPage{Head: latest.Head, Order: "newest"}
	var evs []event.Event
	if from > 0 {
		page.Order = "from"
		page.Epoch, evs, err = src.Read(ctx, name, from-1, PageSize, q)
	} else {
		page.Epoch, evs, err = src.ReadBackward(ctx, name, before, PageSize, q)
	}
	if errors.Is(err, event.ErrCorrupt) {
		evs, page.Error = nil, err.Error()
	} else if err != nil {
		writeEventError(w, err)
		return
	}
	page.Events = make([]shownEvent, len(evs))
	for i := range evs {
		page.Events[i] = show(evs[i])
	}
	// The head was read before the page: appends committed in between are
	// in the page, so the head is at least its highest position; a head
	// of another epoch (the boundary reset in between) says nothing of
	// the page, whose highest position is then the head known.
	if page.Epoch != "" && page.Epoch != latest.Epoch {
		page.Head = 0
	}
	for _, e := range evs {
		page.Head = max(page.Head, e.Position)
	}
	if k := len(page.Events); k == PageSize {
		last := page.Events[k-1].Position
		page.More = page.Order == "from" && last < page.Head || page.Order == "newest" && last > 1
	}
	writeJSON(w, http.StatusOK, page)
}

// shownEvent is an event as the console sends it: its fields, and the
// text the page shows, made here from the stored bytes. The page does not
// parse and encode the data again: a browser would change what it shows
// (an integer beyond 2^53 rounded, 1.0 written 1, keys reordered).
type shownEvent struct {
	event.Event
	// JSON is the event pretty-printed: id, position, epoch, time, type,
	// tags, data and metadata (when it has any), data and metadata as
	// stored, indented.
	JSON string `json:"json"`
	// DataJSON is the data as stored, on one line (the page's preview).
	DataJSON string `json:"data_json"`
}

// show makes the console's text of e.
func show(e event.Event) shownEvent {
	doc := struct {
		ID       string          `json:"id"`
		Position uint64          `json:"position"`
		Epoch    string          `json:"epoch"`
		Time     time.Time       `json:"time"`
		Type     string          `json:"type"`
		Tags     []string        `json:"tags"`
		Data     json.RawMessage `json:"data"`
		Metadata json.RawMessage `json:"metadata,omitempty"`
	}{e.ID, e.Position, e.Epoch, e.Time, e.Type, e.Tags, e.Data, e.Metadata}
	if doc.Tags == nil {
		doc.Tags = []string{}
	}
	if string(doc.Metadata) == "null" {
		doc.Metadata = nil
	}
	if len(doc.Data) == 0 {
		doc.Data = json.RawMessage("null")
	}
	// Not json.Marshal: it writes <, > and & in the data as \u003c and so
	// on, which is not what was stored.
	var compact, indented bytes.Buffer
	enc := json.NewEncoder(&compact)
	enc.SetEscapeHTML(false)
	out := shownEvent{Event: e}
	if err := enc.Encode(doc); err != nil {
		// Not JSON: a stored row the read would have refused; say so.
		out.JSON = fmt.Sprintf("(the event cannot be shown as JSON: %v)", err)
		out.DataJSON = string(e.Data)
		return out
	}
	_ = json.Indent(&indented, bytes.TrimSpace(compact.Bytes()), "", "  ")
	out.JSON = indented.String()
	out.DataJSON = string(bytes.TrimSpace(doc.Data))
	return out
}

// queryOf reads the filter of a log or tail request: one parameter per
// type and per tag (types=a&types=b&tags=x), each value whole, as it was
// appended: a tag may hold a comma or spaces at its ends. Empty values are
// no filter.
func queryOf(v url.Values) (*event.Query, error) {
	values := func(key string) []string {
		var out []string
		for _, s := range v[key] {
			if s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	item := event.QueryItem{Types: values("types"), Tags: values("tags")}
	if len(item.Types) == 0 && len(item.Tags) == 0 {
		return nil, nil
	}
	q := &event.Query{Items: []event.QueryItem{item}}
	if err := event.ValidateQuery(q); err != nil {
		return nil, fmt.Errorf("filter (types, tags): %w", err)
	}
	return q, nil
}

// writeEventError answers a failed read: the caller's mistake as 400, a
// boundary that does not exist as 404, the rest as 503.
func writeEventError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, event.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, event.ErrNotFound):
		code = http.StatusNotFound
	}
	writeJSON(w, code, map[string]any{"error": err.Error()})
}

// tail answers GET /console/events/{name}/tail?types=…&tags=… with
// server-sent events: the boundary's events from its head when the
// request arrives (or after position after=P of epoch=E: a resumed tail),
// catching up from the store
// and then following the stream as any subscription (docs/design.md §7),
// filtered by types and tags. Each event is an "event" message; the
// subscription going live a "live" one, falling behind a "behind" one;
// its end an "end" one with the reason. It ends when the page closes (the
// request's context), the node stops, or the listener stops.
func (s *Server) tail(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	select {
	case s.tails <- struct{}{}:
		defer func() { <-s.tails }()
	default:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": fmt.Sprintf("this node serves %d live tails at once, "+
			"all taken; close a tail (another page's or tab's) and follow again", cap(s.tails))})
		return
	}
	rc := http.NewResponseController(w)
	// Each write has its deadline; the connection's next request none.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	write := func(format string, a ...any) error {
		if err := rc.SetWriteDeadline(time.Now().Add(s.opts.TailWriteTimeout)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, format, a...); err != nil {
			return err
		}
		return rc.Flush()
	}
	name := r.PathValue("name")
	q, err := queryOf(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The listener's stop ends the tail too (its shutdown waits for
	// handlers in flight).
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()
	var after uint64
	var epoch string
	if a := r.URL.Query().Get("after"); a != "" {
		p, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("after: %q is not a position", a)})
			return
		}
		after = p
		// The epoch the page's last event belongs to (the start message's
		// of its first tail): a boundary reset while the page was paused
		// is then the subscription's ErrEpochChanged, an end the page
		// shows, not positions of another epoch followed on.
		epoch = r.URL.Query().Get("epoch")
		if len(epoch) > maxEpochLen {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("epoch: %d bytes, the limit is %d", len(epoch), maxEpochLen)})
			return
		}
	} else {
		lctx, lcancel := context.WithTimeout(ctx, s.opts.Timeout)
		latest, err := src.ReadLatest(lctx, name, nil)
		lcancel()
		if err != nil {
			writeEventError(w, err)
			return
		}
		after, epoch = latest.Head, latest.Epoch
	}
	if err := rc.SetWriteDeadline(time.Now().Add(s.opts.TailWriteTimeout)); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "streaming is not supported here: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(kind string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return write("event: %s\ndata: %s\n\n", kind, b)
	}
	if send("start", map[string]any{"after": after, "epoch": epoch}) != nil {
		return // the client is gone: no subscription for it
	}
	// Keep-alives let the page (and a proxy) tell a quiet boundary from
	// a dead connection. The subscription's handler writes too: mu
	// orders the writes.
	var mu sync.Mutex
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	done := make(chan error, 1)
	go func() {
		done <- src.Subscribe(ctx, name, after, func(_ context.Context, e event.Event) error {
			if !q.Matches(&e) {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			return send("event", show(e))
		}, event.SubscribeOptions{
			Epoch: epoch,
			OnCaughtUp: func(next uint64) {
				mu.Lock()
				defer mu.Unlock()
				_ = send("live", map[string]any{"next": next})
			},
			OnFellBehind: func(next uint64, reason string) {
				mu.Lock()
				defer mu.Unlock()
				_ = send("behind", map[string]any{"next": next, "reason": reason})
			},
		})
	}()
	for {
		select {
		case err := <-done:
			if ctx.Err() == nil {
				mu.Lock()
				_ = send("end", map[string]any{"reason": fmt.Sprint(err)})
				mu.Unlock()
			}
			return
		case <-keep.C:
			mu.Lock()
			werr := write(": keep-alive\n\n")
			mu.Unlock()
			if werr != nil {
				cancel()
			}
		}
	}
}
