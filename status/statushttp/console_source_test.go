package statushttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/history"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/status"
	"github.com/orisun-io/orisun/status/statushttp"
)

// tailSource is a node's side of the console for the tail's own tests:
// a boundary at head 0 whose subscription sends flood events as fast as
// its handler takes them (none when flood is 0) and counts the
// subscriptions open.
type tailSource struct {
	flood int // bytes of data per event
	open  atomic.Int32
	ended atomic.Int32
}

func (*tailSource) History(string, int64) (history.Series, bool) { return history.Series{}, false }
func (*tailSource) Read(context.Context, string, uint64, int, *event.Query) (string, []event.Event, error) {
	return "e1", nil, nil
}
func (*tailSource) ReadBackward(context.Context, string, uint64, int, *event.Query) (string, []event.Event, error) {
	return "e1", nil, nil
}
func (*tailSource) ReadLatest(context.Context, string, *event.Query) (event.Latest, error) {
	return event.Latest{Epoch: "e1"}, nil
}
func (s *tailSource) Subscribe(ctx context.Context, _ string, after uint64, h event.Handler, opts event.SubscribeOptions) error {
	s.open.Add(1)
	defer s.ended.Add(1)
	defer s.open.Add(-1)
	if opts.OnCaughtUp != nil {
		opts.OnCaughtUp(after + 1)
	}
	if s.flood == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	data, _ := json.Marshal(strings.Repeat("x", s.flood))
	for p := after + 1; ; p++ {
		if err := h(ctx, event.Event{ID: fmt.Sprint(p), Epoch: "e1", Position: p, Type: "t", Data: data}); err != nil {
			return err
		}
	}
}

func startTails(t *testing.T, src *tailSource, opts statushttp.Options) *statushttp.Server {
	t.Helper()
	opts.Addr, opts.Events = "127.0.0.1:0", src
	s := statushttp.NewServer(&fixed{st: status.Status{Store: status.Health{OK: true}, NATS: status.Health{OK: true}}}, opts)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// TestConsoleTailCap: a node serves DefaultMaxTails (16) live tails at
// once; the 17th is refused with 503 saying why and what to do, and a
// tail closed frees its place.
func TestConsoleTailCap(t *testing.T) {
	src := &tailSource{}
	s := startTails(t, src, statushttp.Options{})
	open := func() (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Addr()+"/console/events/b/tail", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, func() { cancel(); resp.Body.Close() }
	}
	var closes []context.CancelFunc
	defer func() {
		for _, c := range closes {
			c()
		}
	}()
	for i := range statushttp.DefaultMaxTails {
		resp, c := open()
		closes = append(closes, c)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tail %d: %d", i+1, resp.StatusCode)
		}
	}
	testutil.Eventually(t, "16 subscriptions open", 5*time.Second, 10*time.Millisecond, func() bool { return src.open.Load() == 16 })
	resp, c := open()
	b := make([]byte, 512)
	k, _ := resp.Body.Read(b)
	c()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b[:k]), "16 live tails at once") {
		t.Fatalf("tail 17: %d %s, want 503 naming the cap", resp.StatusCode, b[:k])
	}
	closes[0]()
	closes = closes[1:]
	testutil.Eventually(t, "a closed tail to free its place", 5*time.Second, 20*time.Millisecond, func() bool {
		resp, c := open()
		defer c()
		return resp.StatusCode == http.StatusOK
	})
}

// TestConsoleTailWriteDeadline: a client that stops reading (gone
// without closing its connection) ends its tail and the tail's
// subscription within the write deadline once the connection's buffers
// are full, not after the TCP keep-alive's minutes.
func TestConsoleTailWriteDeadline(t *testing.T) {
	src := &tailSource{flood: 64 << 10}
	s := startTails(t, src, statushttp.Options{TailWriteTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(conn, "GET /console/events/b/tail HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if l, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(l, "200") {
		t.Fatalf("tail: %q %v", l, err)
	}
	// The client reads no more and keeps its connection open.
	took := testutil.Eventually(t, "the tail of a client that stopped reading to end", 20*time.Second, 20*time.Millisecond,
		func() bool { return src.ended.Load() == 1 })
	t.Logf("the subscription ended %s after the client stopped reading (write deadline 300 ms)", took)
}

// movingSource is a boundary that moves between the console's read of its
// head (5) and its read of a page: appends up to 8, or a reset to epoch e2
// with 3 events.
type movingSource struct {
	tailSource
	reset bool
}

func (m *movingSource) ReadLatest(context.Context, string, *event.Query) (event.Latest, error) {
	return event.Latest{Epoch: "e1", Head: 5}, nil
}

func (m *movingSource) events(after, before uint64, backward bool) (string, []event.Event, error) {
	epoch, head := "e1", uint64(8)
	if m.reset {
		epoch, head = "e2", 3
	}
	var evs []event.Event
	for p := uint64(1); p <= head; p++ {
		if p > after && (before == 0 || p < before) {
			evs = append(evs, event.Event{ID: fmt.Sprint(p), Epoch: epoch, Position: p, Type: "t", Data: json.RawMessage(`{}`)})
		}
	}
	if backward {
		slices.Reverse(evs)
	}
	return epoch, evs, nil
}

func (m *movingSource) Read(_ context.Context, _ string, after uint64, _ int, _ *event.Query) (string, []event.Event, error) {
	return m.events(after, 0, false)
}

func (m *movingSource) ReadBackward(_ context.Context, _ string, before uint64, _ int, _ *event.Query) (string, []event.Event, error) {
	return m.events(0, before, true)
}

// TestConsolePageHeadNotBehind: a log page's head is at least the highest
// position it shows (the head is read before the page, and appends may
// commit in between), and, when the boundary was reset in between, not the
// old epoch's.
func TestConsolePageHeadNotBehind(t *testing.T) {
	src := &movingSource{}
	opts := statushttp.Options{Addr: "127.0.0.1:0", Events: src}
	s := statushttp.NewServer(&fixed{}, opts)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	for _, c := range []struct {
		reset bool
		path  string
		head  uint64
	}{
		{false, "/console/events/b", 8},
		{false, "/console/events/b?from=1", 8},
		{true, "/console/events/b", 3},
		{true, "/console/events/b?from=2", 3},
	} {
		src.reset = c.reset
		code, body := get(t, s.Addr(), c.path)
		var p struct {
			Head   uint64 `json:"head"`
			Events []struct {
				Position uint64 `json:"position"`
			} `json:"events"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", c.path, code, body)
		}
		if p.Head != c.head {
			t.Errorf("%s (reset %v): head %d with %d events shown, want %d", c.path, c.reset, p.Head, len(p.Events), c.head)
		}
	}
}
