package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/nats-io/nats.go"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
)

// stdin is where `orisun append` reads events when none is given by flags.
var stdin io.Reader = os.Stdin

// defaultURL is the NATS URL the client commands use without --server or
// ORISUN_URL: the one a default `orisun serve` listens on.
const defaultURL = "nats://127.0.0.1:4222"

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

func newFlagSet(name string, stderr io.Writer, cf *clientFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := os.Getenv("ORISUN_URL")
	if url == "" {
		url = defaultURL
	}
	fs.StringVar(&cf.server, "server", url, "NATS URL of the orisun node (env ORISUN_URL)")
	fs.DurationVar(&cf.timeout, "timeout", 10*time.Second, "timeout of each request")
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

// clientCommand runs one of the client sub-commands; the exit code is 2
// for a usage error, 1 for a failure.
func clientCommand(cmd string, args []string, stdout, stderr io.Writer) int {
	var cf clientFlags
	fs := newFlagSet(cmd, stderr, &cf)
	var (
		typ, data, metadata, tags, id string
		after, from                   uint64
		limit                         int
		create                        string
		qTypes, qTags                 string
		ifNoneAfter                   uint64
	)
	addQuery := func(what string) {
		fs.StringVar(&qTypes, "query-types", "", "comma-separated event types "+what+" (any of them)")
		fs.StringVar(&qTags, "query-tags", "", "comma-separated tags "+what+" (all of them)")
	}
	want := 1
	switch cmd {
	case "append":
		fs.StringVar(&typ, "type", "", "event type (without it, events are read as JSON lines from stdin)")
		fs.StringVar(&data, "data", "", "event data, a JSON value")
		fs.StringVar(&metadata, "metadata", "", "event metadata, a JSON value")
		fs.StringVar(&tags, "tags", "", "comma-separated tags")
		fs.StringVar(&id, "id", "", "event id (a UUID; default: generated, so a retry of this command appends again)")
		fs.Uint64Var(&ifNoneAfter, "if-none-after", 0, "append only if no event matching --query-types/--query-tags is after this position (the head `orisun latest` printed)")
		addQuery("of the condition")
	case "read":
		fs.Uint64Var(&after, "after", 0, "read events after this position")
		fs.IntVar(&limit, "limit", 100, "most events to read (1–10000)")
		addQuery("to read (default: every event)")
	case "latest":
		addQuery("to match (default: every event)")
	case "tail":
		fs.Uint64Var(&from, "from", 0, "deliver events after this position, then follow")
	case "boundaries":
		fs.StringVar(&create, "create", "", "create this boundary")
		want = 0
	}
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(pos) != want {
		if want == 1 {
			fmt.Fprintf(stderr, "orisun %s: name one boundary, e.g. orisun %s default\n", cmd, cmd)
		} else {
			fmt.Fprintf(stderr, "orisun %s: unexpected argument %q\n", cmd, pos[0])
		}
		return 2
	}
	q := cliQuery(qTypes, qTags)
	conditional := false
	fs.Visit(func(f *flag.Flag) { conditional = conditional || f.Name == "if-none-after" })
	if cmd == "append" && !conditional && q != nil {
		fmt.Fprintln(stderr, "orisun append: --query-types/--query-tags make a condition and need --if-none-after N (the head `orisun latest` printed)")
		return 2
	}
	if cmd == "append" && typ != "" && data == "" {
		fmt.Fprintln(stderr, "orisun append: --data is required with --type (a JSON value, e.g. --data '{\"order\":42}')")
		return 2
	}
	copts, err := cf.creds.options()
	if err != nil {
		fmt.Fprintf(stderr, "orisun %s: %v\n", cmd, err)
		return 2
	}
	c, err := client.Connect(cf.server, append(copts, client.Name("orisun-cli"), client.Timeout(cf.timeout))...)
	if err != nil {
		fmt.Fprintf(stderr, "orisun %s: %v\n", cmd, err)
		return 1
	}
	defer c.Close()
	ctx := context.Background()
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	switch cmd {
	case "append":
		var evs []event.Input
		if typ != "" {
			e := event.Input{ID: id, Type: typ, Data: json.RawMessage(data)}
			if metadata != "" {
				e.Metadata = json.RawMessage(metadata)
			}
			if tags != "" {
				e.Tags = strings.Split(tags, ",")
			}
			evs = append(evs, e)
		} else {
			evs, err = readEvents(stdin)
			if err != nil {
				fmt.Fprintf(stderr, "orisun append: %v\n", err)
				return 2
			}
		}
		for _, e := range evs {
			if e.Data != nil && !json.Valid(e.Data) {
				fmt.Fprintf(stderr, "orisun append: --data is not valid JSON (quote strings: --data '\"text\"')\n")
				return 2
			}
			if e.Metadata != nil && !json.Valid(e.Metadata) {
				fmt.Fprintf(stderr, "orisun append: --metadata is not valid JSON (e.g. --metadata '{\"by\":\"cli\"}')\n")
				return 2
			}
		}
		var cond *event.Condition
		if conditional {
			// No query: any newer event fails the condition.
			cond = &event.Condition{After: ifNoneAfter}
			if q != nil {
				cond.Query = *q
			}
		}
		res, err := c.Append(ctx, pos[0], evs, cond)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if cf.json {
			writeJSON(w, res)
		} else {
			fmt.Fprintf(w, "appended positions %d–%d (epoch %s)\n", res.First, res.Last, res.Epoch)
		}
	case "read":
		res, err := c.Read(ctx, pos[0], after, limit, q)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		for i := range res.Events {
			printEvent(w, &res.Events[i], cf.json)
		}
	case "latest":
		l, err := c.ReadLatest(ctx, pos[0], q)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if cf.json {
			writeJSON(w, l)
			break
		}
		fmt.Fprintf(w, "head %d\tepoch %s\n", l.Head, l.Epoch)
		if l.Event == nil {
			fmt.Fprintln(w, "no matching event")
		} else {
			printEvent(w, l.Event, false)
		}
	case "tail":
		return tail(c, pos[0], from, cf.json, w, stderr)
	case "boundaries":
		var bs []event.Boundary
		if create != "" {
			b, err := c.CreateBoundary(ctx, create)
			if err != nil {
				return fail(stderr, cmd, err)
			}
			bs = []event.Boundary{b}
		} else if bs, err = c.Boundaries(ctx); err != nil {
			return fail(stderr, cmd, err)
		}
		for _, b := range bs {
			if cf.json {
				writeJSON(w, b)
			} else {
				fmt.Fprintf(w, "%s\thead %d\tepoch %s\n", b.Name, b.Head, b.Epoch)
			}
		}
	}
	return 0
}

// cliQuery is the one-item query of --query-types and --query-tags; nil
// when both are empty.
func cliQuery(types, tags string) *event.Query {
	if types == "" && tags == "" {
		return nil
	}
	var it event.QueryItem
	if types != "" {
		it.Types = strings.Split(types, ",")
	}
	if tags != "" {
		it.Tags = strings.Split(tags, ",")
	}
	return &event.Query{Items: []event.QueryItem{it}}
}

// tail catches up and follows until SIGINT or SIGTERM, one event per line.
func tail(c *client.Client, boundary string, from uint64, asJSON bool, w *bufio.Writer, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := c.Subscribe(ctx, boundary, from, func(_ context.Context, e event.Event) error {
		printEvent(w, &e, asJSON)
		// Each line is visible at once: tail is read by people and pipes.
		return w.Flush()
	}, client.SubscribeOptions{})
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return 0
	}
	return fail(stderr, "tail", err)
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
