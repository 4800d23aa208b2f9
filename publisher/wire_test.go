package publisher_test

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orisun-io/orisun/internal/testutil/natstest"
	"github.com/orisun-io/orisun/natsembed"
)

// wire is a test's hand on one connection to the embedded server: every
// byte between the client and the server passes through it, one NATS
// protocol operation (a frame) at a time, so that a test can hold or
// rewrite a message the client publishes and delay an answer the server
// sends, with the client and the server left as they are. The connection
// is the server's in-process pipe, as orisun's own.
type wire struct {
	net.Conn
	// sent is told of each message the client publishes (PUB, HPUB),
	// before it goes to the server. It may rewrite the frame's bytes in
	// place, keeping their length, and may return a channel: the frame
	// and everything after it wait until the channel is closed, and so
	// does the client's write, which holds the connection's lock (every
	// publish of the connection waits).
	sent func(f *frame) (hold <-chan struct{})
	// answer is told of each message the server sends (MSG, HMSG) before
	// the client reads it, one message per read; it may block (the
	// answer waits).
	answer func(f *frame)
	// handled is told of each message the server sent once the client
	// has handled it: nats.go reads again only after it has delivered
	// every message of its last read (to a ChanSubscribe's channel).
	handled func(f *frame)

	writes   int      // the client's writes so far
	out      []byte   // bytes from the client not yet forwarded
	in       []byte   // bytes from the server not yet a whole frame
	ready    []byte   // the frame the client reads
	readyF   *frame   // its message, nil when it is another operation
	returned []*frame // messages wholly returned to the client
	buf      []byte
}

// frame is one protocol operation: a message (PUB, HPUB from the client;
// MSG, HMSG from the server) or another (PING, INFO, SUB, ...).
type frame struct {
	op, subject, reply string
	raw                []byte // the whole frame: its line, headers, body
	hdr, body          []byte // within raw (hdr nil when none)
	// write numbers the client's write that carried the frame, from 1
	// (0 for the server's frames).
	write int
}

// msg reports whether f is a message.
func (f *frame) msg() bool { return f.op == "PUB" || f.op == "HPUB" || f.op == "MSG" || f.op == "HMSG" }

// fastBatch is the batch id and the message number (from 1) of a message
// sent with a fast-ingest batch reply subject
// (<inbox>.<id>.<ack every>.<gap mode>.<n>.<operation>.$FI), or of the
// server's answer on one; ok false otherwise.
func fastBatch(subject string) (id string, n int, ok bool) {
	if !strings.HasSuffix(subject, ".$FI") {
		return "", 0, false
	}
	parts := strings.Split(subject, ".")
	if len(parts) < 7 {
		return "", 0, false
	}
	n, err := strconv.Atoi(parts[len(parts)-3])
	return parts[len(parts)-6], n, err == nil
}

// nextFrame returns the first whole frame of b and its length; 0 when b
// holds no whole frame yet.
func nextFrame(b []byte) (*frame, int) {
	eol := bytes.Index(b, []byte("\r\n"))
	if eol < 0 {
		return nil, 0
	}
	fields := strings.Fields(string(b[:eol]))
	if len(fields) == 0 {
		return &frame{raw: b[:eol+2]}, eol + 2
	}
	f := &frame{op: strings.ToUpper(fields[0])}
	if !f.msg() {
		f.raw = b[:eol+2]
		return f, eol + 2
	}
	// PUB <subject> [reply] <size>, HPUB <subject> [reply] <hdr> <size>;
	// MSG <subject> <sid> [reply] <size>, HMSG with <hdr> <size>.
	args := fields[1:]
	headers := f.op == "HPUB" || f.op == "HMSG"
	hlen := 0
	size, _ := strconv.Atoi(args[len(args)-1])
	args = args[:len(args)-1]
	if headers {
		hlen, _ = strconv.Atoi(args[len(args)-1])
		args = args[:len(args)-1]
	}
	f.subject, args = args[0], args[1:]
	if f.op == "MSG" || f.op == "HMSG" {
		args = args[1:] // the sid
	}
	if len(args) > 0 {
		f.reply = args[0]
	}
	end := eol + 2 + size + 2
	if len(b) < end {
		return nil, 0
	}
	f.raw = b[:end]
	payload := b[eol+2 : eol+2+size]
	if headers {
		f.hdr = payload[:hlen]
	}
	f.body = payload[hlen:]
	return f, end
}

func (w *wire) Write(p []byte) (int, error) {
	w.writes++
	w.out = append(w.out, p...)
	from, at := 0, 0 // w.out[from:at] goes next
	forward := func() error {
		// Never an empty write: a pipe's waits for a read.
		if at > from {
			if _, err := w.Conn.Write(w.out[from:at]); err != nil {
				return err
			}
		}
		from = at
		return nil
	}
	for {
		f, n := nextFrame(w.out[at:])
		if n == 0 {
			break
		}
		f.write = w.writes
		if f.msg() && w.sent != nil {
			if hold := w.sent(f); hold != nil {
				if err := forward(); err != nil {
					return 0, err
				}
				<-hold
			}
		}
		at += n
	}
	if err := forward(); err != nil {
		return 0, err
	}
	w.out = append([]byte(nil), w.out[at:]...)
	return len(p), nil
}

func (w *wire) Read(p []byte) (int, error) {
	for {
		if len(w.ready) > 0 {
			n := copy(p, w.ready)
			w.ready = w.ready[n:]
			if len(w.ready) == 0 && w.readyF != nil {
				w.returned = append(w.returned, w.readyF)
				w.readyF = nil
			}
			return n, nil
		}
		// The client reads again: it has handled what it read before.
		for _, f := range w.returned {
			if w.handled != nil {
				w.handled(f)
			}
		}
		w.returned = w.returned[:0]
		if f, n := nextFrame(w.in); n > 0 {
			if f.msg() {
				if w.answer != nil {
					w.answer(f)
				}
				w.readyF = f
			}
			w.ready = f.raw
			w.in = w.in[n:]
			continue
		}
		if w.buf == nil {
			w.buf = make([]byte, 64*1024)
		}
		n, err := w.Conn.Read(w.buf)
		w.in = append(append([]byte(nil), w.in...), w.buf[:n]...)
		if err != nil && n == 0 {
			return 0, err
		}
	}
}

// wired connects to s as orisun, through w (its Conn is set here), and
// returns the connection's JetStream context; the connection is closed
// when the test ends.
func wired(t *testing.T, s *natsembed.Server, name string, w *wire) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var dialed atomic.Bool
	interpose := func(o *nats.Options) error {
		inner := o.InProcessServer
		o.InProcessServer = connProvider(func() (net.Conn, error) {
			c, err := inner.InProcessConn()
			if err != nil {
				return nil, err
			}
			if !dialed.CompareAndSwap(false, true) {
				// A reconnection goes around the wire: the test's
				// hooks are for one connection.
				t.Error("the wired connection reconnected")
				return c, nil
			}
			w.Conn = c
			return w, nil
		})
		return nil
	}
	nc := natstest.Orisun(t, s, name, interpose, nats.MaxReconnects(0))
	return nc, natstest.JetStream(t, nc)
}

// connProvider is a nats.InProcessConnProvider of a function.
type connProvider func() (net.Conn, error)

func (f connProvider) InProcessConn() (net.Conn, error) { return f() }
