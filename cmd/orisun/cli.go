package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
)

// stdin is where `orisun append` reads events when none is given by flags.
var stdin io.Reader = os.Stdin

// defaultURL is the NATS URL the client commands use without --server or
// ORISUN_URL: the one a default `orisun serve` listens on.
var defaultURL = "nats://" + net.JoinHostPort(orisun.NATSHostDefault, strconv.Itoa(orisun.NATSPortDefault))

const (
	// requestTimeout bounds each request of a command to a node (the
	// client commands' --timeout).
	requestTimeout = 10 * time.Second
	// readLimitDefault is the page of `orisun read` without --limit.
	readLimitDefault = 100
)

// clientFlags are the flags every client command has.
type clientFlags struct {
	server  string
	timeout time.Duration
	json    bool
	creds   credFlags
}

// credFlags are how a client command authenticates to a NATS server with
// access control on (docs/security.md).
type credFlags struct {
	user, password, token  string
	tlsCA, tlsCert, tlsKey string
}

// addCredFlags adds --user, --password, --token and the TLS flags. The
// credentials default to ORISUN_NATS_USER, ORISUN_NATS_PASSWORD and
// ORISUN_NATS_TOKEN: the application credentials the server is configured
// with, which are what a person on the same host uses.
func addCredFlags(fs *flag.FlagSet, c *credFlags) {
	fs.StringVar(&c.user, "user", os.Getenv("ORISUN_NATS_USER"), "NATS user (env ORISUN_NATS_USER)")
	fs.StringVar(&c.password, "password", os.Getenv("ORISUN_NATS_PASSWORD"), "NATS password (env ORISUN_NATS_PASSWORD)")
	fs.StringVar(&c.token, "token", os.Getenv("ORISUN_NATS_TOKEN"), "NATS token (env ORISUN_NATS_TOKEN)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM file of the CA that signed the server's certificate (TLS)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate, when the server verifies clients (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client key (with --tls-cert)")
}

// admin makes the admin's credentials, ORISUN_NATS_ADMIN_USER and
// _PASSWORD or ORISUN_NATS_ADMIN_TOKEN, the command's when they are set and
// no --user or --token was given: boundary creation is the admin's
// (docs/security.md).
func (c *credFlags) admin(fs *flag.FlagSet) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "user" || f.Name == "token" || f.Name == "password" })
	user, token := os.Getenv("ORISUN_NATS_ADMIN_USER"), os.Getenv("ORISUN_NATS_ADMIN_TOKEN")
	if given || user == "" && token == "" {
		return
	}
	c.user, c.password, c.token = user, os.Getenv("ORISUN_NATS_ADMIN_PASSWORD"), token
}

// options turns the flags into client options; a half-given pair is an
// error naming the flag.
func (c credFlags) options() ([]client.Option, error) {
	var opts []client.Option
	switch {
	case c.token != "" && c.user != "":
		return nil, errors.New("--token and --user exclude each other")
	case c.user != "" && c.password == "":
		return nil, errors.New("--user needs --password (or ORISUN_NATS_PASSWORD)")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.user != "" {
		opts = append(opts, client.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, client.Token(c.token))
	}
	if c.tlsCA != "" {
		opts = append(opts, client.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, client.NATSOptions(nats.ClientCert(c.tlsCert, c.tlsKey)))
	}
	return opts, nil
}

// newFlagSet returns the flag set of a client command with the flags every
// one has.
func newFlagSet(name string, stderr io.Writer, cf *clientFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := os.Getenv("ORISUN_URL")
	if url == "" {
		url = defaultURL
	}
	fs.StringVar(&cf.server, "server", url, "NATS URL of the orisun node (env ORISUN_URL)")
	fs.DurationVar(&cf.timeout, "timeout", requestTimeout, "timeout of each request")
	fs.BoolVar(&cf.json, "json", false, "print JSON, one value per line")
	addCredFlags(fs, &cf.creds)
	return fs
}

// parse parses flags given before or after the positional arguments
// (`orisun read default --after 5` and `orisun read --after 5 default`),
// and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// The client sub-commands. Each parses its flags, checks what it can
// before it connects, and talks to the node; the exit code is 2 for a
// usage error, 1 for a failure.

// appendCmd is `orisun append <boundary>`: one event from the flags, or
// JSON lines from stdin, optionally under a condition.
func appendCmd(args []string, stdout, stderr io.Writer) int {
	var (
		cf clientFlags
		af appendFlags
	)
	fs := newFlagSet("append", stderr, &cf)
	af.add(fs)
	boundary, code, ok := parseBoundary(fs, args, stderr)
	if !ok {
		return code
	}
	fs.Visit(func(f *flag.Flag) { af.conditional = af.conditional || f.Name == "if-none-after" })
	if !af.conditional && af.query.query() != nil {
		fmt.Fprintln(stderr, "orisun append: --query-types/--query-tags make a condition and need --if-none-after N (the head `orisun latest` printed)")
		return 2
	}
	if af.typ != "" && af.data == "" {
		fmt.Fprintln(stderr, "orisun append: --data is required with --type (a JSON value, e.g. --data '{\"order\":42}')")
		return 2
	}
	s, code := cf.open("append", stdout, stderr)
	if s == nil {
		return code
	}
	defer s.close()
	evs, err := af.events()
	if err != nil {
		fmt.Fprintf(stderr, "orisun append: %v\n", err)
		return 2
	}
	if code, ok := checkJSON(evs, stderr); !ok {
		return code
	}
	res, err := s.c.Append(s.ctx, boundary, evs, af.condition())
	if err != nil {
		return fail(stderr, "append", err)
	}
	if cf.json {
		writeJSON(s.w, res)
	} else {
		fmt.Fprintf(s.w, "appended positions %d–%d (epoch %s)\n", res.First, res.Last, res.Epoch)
	}
	return 0
}

// appendFlags are the flags of `orisun append`: one event, and a condition.
type appendFlags struct {
	typ, data, metadata, tags, id string
	ifNoneAfter                   uint64
	query                         queryFlags
	// conditional is whether --if-none-after was given (0 is a position).
	conditional bool
}

func (af *appendFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&af.typ, "type", "", "event type (without it, events are read as JSON lines from stdin)")
	fs.StringVar(&af.data, "data", "", "event data, a JSON value")
	fs.StringVar(&af.metadata, "metadata", "", "event metadata, a JSON value")
	fs.StringVar(&af.tags, "tags", "", "comma-separated tags")
	fs.StringVar(&af.id, "id", "", "event id (a UUID; default: generated, so a retry of this command appends again)")
	fs.Uint64Var(&af.ifNoneAfter, "if-none-after", 0, "append only if no event matching --query-types/--query-tags is after this position (the head `orisun latest` printed)")
	af.query.add(fs, "of the condition")
}

// events is the event of the flags, or without --type the events of stdin.
func (af *appendFlags) events() ([]event.Input, error) {
	if af.typ == "" {
		return readEvents(stdin)
	}
	e := event.Input{ID: af.id, Type: af.typ, Data: json.RawMessage(af.data)}
	if af.metadata != "" {
		e.Metadata = json.RawMessage(af.metadata)
	}
	if af.tags != "" {
		e.Tags = strings.Split(af.tags, ",")
	}
	return []event.Input{e}, nil
}

// condition is the append's condition; nil without --if-none-after.
func (af *appendFlags) condition() *event.Condition {
	if !af.conditional {
		return nil
	}
	// No query: any newer event fails the condition.
	cond := &event.Condition{After: af.ifNoneAfter}
	if q := af.query.query(); q != nil {
		cond.Query = *q
	}
	return cond
}

// checkJSON refuses events whose data or metadata is not JSON, before
// anything is sent, with a hint on how to quote it.
func checkJSON(evs []event.Input, stderr io.Writer) (code int, ok bool) {
	for _, e := range evs {
		if e.Data != nil && !json.Valid(e.Data) {
			fmt.Fprintf(stderr, "orisun append: --data is not valid JSON (quote strings: --data '\"text\"')\n")
			return 2, false
		}
		if e.Metadata != nil && !json.Valid(e.Metadata) {
			fmt.Fprintf(stderr, "orisun append: --metadata is not valid JSON (e.g. --metadata '{\"by\":\"cli\"}')\n")
			return 2, false
		}
	}
	return 0, true
}

// readCmd is `orisun read <boundary>`: one page of events.
func readCmd(args []string, stdout, stderr io.Writer) int {
	var (
		cf    clientFlags
		after uint64
		limit int
		qf    queryFlags
	)
	fs := newFlagSet("read", stderr, &cf)
	fs.Uint64Var(&after, "after", 0, "read events after this position")
	fs.IntVar(&limit, "limit", readLimitDefault, fmt.Sprintf("most events to read (1–%d)", api.MaxReadLimit))
	qf.add(fs, "to read (default: every event)")
	boundary, code, ok := parseBoundary(fs, args, stderr)
	if !ok {
		return code
	}
	s, code := cf.open("read", stdout, stderr)
	if s == nil {
		return code
	}
	defer s.close()
	res, err := s.c.Read(s.ctx, boundary, after, limit, qf.query())
	if err != nil {
		return fail(stderr, "read", err)
	}
	for i := range res.Events {
		printEvent(s.w, &res.Events[i], cf.json)
	}
	return 0
}

// latestCmd is `orisun latest <boundary>`: the head and the latest matching
// event, the context of a decision.
func latestCmd(args []string, stdout, stderr io.Writer) int {
	var (
		cf clientFlags
		qf queryFlags
	)
	fs := newFlagSet("latest", stderr, &cf)
	qf.add(fs, "to match (default: every event)")
	boundary, code, ok := parseBoundary(fs, args, stderr)
	if !ok {
		return code
	}
	s, code := cf.open("latest", stdout, stderr)
	if s == nil {
		return code
	}
	defer s.close()
	l, err := s.c.ReadLatest(s.ctx, boundary, qf.query())
	if err != nil {
		return fail(stderr, "latest", err)
	}
	if cf.json {
		writeJSON(s.w, l)
		return 0
	}
	fmt.Fprintf(s.w, "head %d\tepoch %s\n", l.Head, l.Epoch)
	if l.Event == nil {
		fmt.Fprintln(s.w, "no matching event")
	} else {
		printEvent(s.w, l.Event, false)
	}
	return 0
}

// tailCmd is `orisun tail <boundary>`: catch up, then follow until SIGINT
// or SIGTERM, one event per line.
func tailCmd(args []string, stdout, stderr io.Writer) int {
	var (
		cf   clientFlags
		from uint64
	)
	fs := newFlagSet("tail", stderr, &cf)
	fs.Uint64Var(&from, "from", 0, "deliver events after this position, then follow")
	boundary, code, ok := parseBoundary(fs, args, stderr)
	if !ok {
		return code
	}
	s, code := cf.open("tail", stdout, stderr)
	if s == nil {
		return code
	}
	defer s.close()
	ctx, stop := signal.NotifyContext(s.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := s.c.Subscribe(ctx, boundary, from, func(_ context.Context, e event.Event) error {
		printEvent(s.w, &e, cf.json)
		// Each line is visible at once: tail is read by people and pipes.
		return s.w.Flush()
	}, client.SubscribeOptions{})
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return 0
	}
	return fail(stderr, "tail", err)
}

// boundariesCmd is `orisun boundaries`: list the boundaries, or create one.
func boundariesCmd(args []string, stdout, stderr io.Writer) int {
	var (
		cf     clientFlags
		create string
	)
	fs := newFlagSet("boundaries", stderr, &cf)
	fs.StringVar(&create, "create", "", "create this boundary (with credentials configured, the admin's: "+
		"ORISUN_NATS_ADMIN_USER/ORISUN_NATS_ADMIN_PASSWORD or ORISUN_NATS_ADMIN_TOKEN when set, else --user/--password or --token)")
	if code, ok := parseNone(fs, args, stderr); !ok {
		return code
	}
	if create != "" {
		cf.creds.admin(fs)
	}
	s, code := cf.open("boundaries", stdout, stderr)
	if s == nil {
		return code
	}
	defer s.close()
	var (
		bs  []event.Boundary
		err error
	)
	if create != "" {
		b, err := s.c.CreateBoundary(s.ctx, create)
		if errors.Is(err, nats.ErrPermissionViolation) {
			fmt.Fprintf(stderr, "orisun boundaries: %v\ncreating a boundary needs the admin's credentials: set ORISUN_NATS_ADMIN_USER "+
				"and ORISUN_NATS_ADMIN_PASSWORD (or ORISUN_NATS_ADMIN_TOKEN) as the server has them, or pass the admin's --user "+
				"and --password (or --token)\n", err)
			return 1
		}
		if err != nil {
			return fail(stderr, "boundaries", err)
		}
		bs = []event.Boundary{b}
	} else if bs, err = s.c.Boundaries(s.ctx); err != nil {
		return fail(stderr, "boundaries", err)
	}
	for _, b := range bs {
		if cf.json {
			writeJSON(s.w, b)
		} else {
			fmt.Fprintf(s.w, "%s\thead %d\tepoch %s\n", b.Name, b.Head, b.Epoch)
		}
	}
	return 0
}

// parseBoundary parses a command that names one boundary, the one
// positional argument. When ok is false the command ends with code: 0
// for --help, 2 for a usage error (the flag package or this function
// has said what is wrong).
// parseNone parses a command that takes flags only: ok is false when the
// command is done, with code (0 for --help, 2 for a usage error).
func parseNone(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0, false
	}
	if err != nil {
		return 2, false
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "orisun %s: unexpected argument %q\n", fs.Name(), pos[0])
		return 2, false
	}
	return 0, true
}

func parseBoundary(fs *flag.FlagSet, args []string, stderr io.Writer) (boundary string, code int, ok bool) {
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return "", 0, false
	}
	if err != nil {
		return "", 2, false
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "orisun %s: name one boundary, e.g. orisun %s default\n", fs.Name(), fs.Name())
		return "", 2, false
	}
	return pos[0], 0, true
}

// session is a client command's connection to the node and its buffered
// output.
type session struct {
	ctx context.Context
	c   *client.Client
	w   *bufio.Writer
}

// open connects as the flags say. On failure it says why and returns nil
// and the exit code: 2 for bad credential flags, 1 when the node cannot be
// reached.
func (cf *clientFlags) open(cmd string, stdout, stderr io.Writer) (*session, int) {
	copts, err := cf.creds.options()
	if err != nil {
		fmt.Fprintf(stderr, "orisun %s: %v\n", cmd, err)
		return nil, 2
	}
	c, err := client.Connect(cf.server, append(copts, client.Name("orisun-cli"), client.Timeout(cf.timeout))...)
	if err != nil {
		fmt.Fprintf(stderr, "orisun %s: %v\n", cmd, err)
		return nil, 1
	}
	return &session{ctx: context.Background(), c: c, w: bufio.NewWriter(stdout)}, 0
}

// close writes out what is buffered and closes the connection.
func (s *session) close() {
	s.w.Flush()
	s.c.Close()
}

// queryFlags are --query-types and --query-tags: a one-item query.
type queryFlags struct{ types, tags string }

// add adds the flags; what says what the query selects.
func (q *queryFlags) add(fs *flag.FlagSet, what string) {
	fs.StringVar(&q.types, "query-types", "", "comma-separated event types "+what+" (any of them)")
	fs.StringVar(&q.tags, "query-tags", "", "comma-separated tags "+what+" (all of them)")
}

// query is the one-item query of the flags; nil when both are empty.
func (q queryFlags) query() *event.Query {
	if q.types == "" && q.tags == "" {
		return nil
	}
	var it event.QueryItem
	if q.types != "" {
		it.Types = strings.Split(q.types, ",")
	}
	if q.tags != "" {
		it.Tags = strings.Split(q.tags, ",")
	}
	return &event.Query{Items: []event.QueryItem{it}}
}

// readEvents reads events as JSON lines (event-in objects of the API).
func readEvents(r io.Reader) ([]event.Input, error) {
	var evs []event.Input
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 64<<20)
	for line := 1; s.Scan(); line++ {
		text := strings.TrimSpace(s.Text())
		if text == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		var e event.Input
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("stdin line %d: not an event (%v); send one JSON object per line: {\"type\":…,\"data\":…}", line, err)
		}
		evs = append(evs, e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(evs) == 0 {
		return nil, errors.New("no events: give --type and --data, or JSON lines on stdin")
	}
	return evs, nil
}

func printEvent(w io.Writer, e *event.Event, asJSON bool) {
	if asJSON {
		writeJSON(w, e)
		return
	}
	fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", e.Position, e.Type, e.ID, e.Time.UTC().Format(time.RFC3339Nano), e.Data)
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

// fail prints an error with its API code and returns the exit code 1.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "orisun %s: %v\n", cmd, err)
	if api.CodeOf(err) == api.CodeUnavailable {
		fmt.Fprintln(stderr, "is orisun running there? set --server or ORISUN_URL")
	}
	return 1
}
