package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
)

// stdin is where `orisun append` reads events when none is given by flags.
var stdin io.Reader = os.Stdin

// defaultURL is the NATS URL the client commands use without --server,
// ORISUN_URL or NATS_URL: the one a default `orisun serve` listens on.
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

// addClientFlags adds the flags every client command has: the server, as
// the nats CLI names it (-s, --server, NATS_URL), the timeout, --json and
// the credentials.
func addClientFlags(c *cobra.Command, cf *clientFlags) {
	fs := c.Flags()
	fs.SortFlags = false // the command's own flags first, as added
	fs.StringVarP(&cf.server, "server", "s", "", "NATS URL of the orisun node (default: $ORISUN_URL, else $NATS_URL, else "+defaultURL+")")
	fs.DurationVar(&cf.timeout, "timeout", requestTimeout, "timeout of each request")
	fs.BoolVar(&cf.json, "json", false, "print JSON, one value per line")
	addCredFlags(fs, &cf.creds)
}

// url is the server to connect to: the flag, else ORISUN_URL, else NATS_URL
// (the nats CLI's), else the default node's.
func (cf *clientFlags) url() string {
	for _, u := range []string{cf.server, os.Getenv("ORISUN_URL"), os.Getenv("NATS_URL")} {
		if u != "" {
			return u
		}
	}
	return defaultURL
}

// credFlags are how a client command authenticates to a NATS server with
// access control on (docs/security.md).
type credFlags struct {
	fs                     *pflag.FlagSet
	asAdmin                bool
	user, password, token  string
	creds                  string
	tlsCA, tlsCert, tlsKey string
	// userVar and passwordVar name where the user and the password came
	// from, for the messages: the flags, or the variables fromEnv read.
	userVar, passwordVar string
}

// addCredFlags adds --user, --password, --token, --creds and the TLS flags.
// The TLS flags also answer to the nats CLI's names (--tlsca, --tlscert,
// --tlskey).
func addCredFlags(fs *pflag.FlagSet, c *credFlags) {
	c.fs = fs
	fs.StringVar(&c.user, "user", "", "NATS user (default: $ORISUN_NATS_USER)")
	fs.StringVar(&c.password, "password", "", "NATS password (default: $ORISUN_NATS_PASSWORD)")
	fs.StringVar(&c.token, "token", "", "NATS token (default: $ORISUN_NATS_TOKEN)")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file: a user JWT and NKey seed, for a JWT-secured NATS (default: $NATS_CREDS)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM file of the CA that signed the server's certificate (TLS)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "client certificate, when the server verifies clients (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "client key (with --tls-cert)")
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		switch name {
		case "tlsca":
			name = "tls-ca"
		case "tlscert":
			name = "tls-cert"
		case "tlskey":
			name = "tls-key"
		}
		return pflag.NormalizedName(name)
	})
}

// fromEnv fills the credentials from the environment when no credential
// flag was given: ORISUN_NATS_USER, ORISUN_NATS_PASSWORD and
// ORISUN_NATS_TOKEN (the application credentials a server on this host is
// configured with) and the nats CLI's NATS_CREDS. A flag given overrides
// them all, so that --creds is not mixed with a user from the environment.
// With asAdmin set (boundaries --create), ORISUN_NATS_ADMIN_USER and
// _PASSWORD or ORISUN_NATS_ADMIN_TOKEN come first.
func (c *credFlags) fromEnv() {
	c.userVar, c.passwordVar = "--user", "--password"
	for _, f := range []string{"user", "password", "token", "creds"} {
		if c.fs != nil && c.fs.Changed(f) {
			return
		}
	}
	c.user, c.password, c.token = os.Getenv("ORISUN_NATS_USER"), os.Getenv("ORISUN_NATS_PASSWORD"), os.Getenv("ORISUN_NATS_TOKEN")
	c.creds = os.Getenv("NATS_CREDS")
	c.userVar, c.passwordVar = "ORISUN_NATS_USER", "ORISUN_NATS_PASSWORD"
	// Boundary creation is the admin's (docs/security.md): the admin's
	// credentials win when they are set.
	if user, token := os.Getenv("ORISUN_NATS_ADMIN_USER"), os.Getenv("ORISUN_NATS_ADMIN_TOKEN"); c.asAdmin && (user != "" || token != "") {
		c.user, c.password, c.token, c.creds = user, os.Getenv("ORISUN_NATS_ADMIN_PASSWORD"), token, ""
		c.userVar, c.passwordVar = "ORISUN_NATS_ADMIN_USER", "ORISUN_NATS_ADMIN_PASSWORD"
	}
}

// options turns the flags into client options; a half-given pair or two
// ways to log in are an error naming the flags.
func (c *credFlags) options() ([]client.Option, error) {
	c.fromEnv()
	var opts []client.Option
	switch {
	case c.creds != "" && (c.user != "" || c.token != ""):
		return nil, errors.New("--creds and --user/--token exclude each other (NATS_CREDS and ORISUN_NATS_USER/ORISUN_NATS_TOKEN too); log in one way")
	case c.token != "" && c.user != "":
		return nil, errors.New("--token and --user exclude each other")
	case c.user != "" && c.password == "" && c.userVar == "--user":
		return nil, errors.New("--user needs --password")
	case c.user != "" && c.password == "":
		// From the environment: name the variables that were read.
		return nil, fmt.Errorf("%s is set but %s is not: set it too, or pass --user and --password", c.userVar, c.passwordVar)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.user != "" {
		opts = append(opts, client.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, client.Token(c.token))
	}
	if c.creds != "" {
		if _, err := os.Stat(c.creds); err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, client.NATSOptions(nats.UserCredentials(c.creds)))
	}
	if c.tlsCA != "" {
		opts = append(opts, client.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, client.NATSOptions(nats.ClientCert(c.tlsCert, c.tlsKey)))
	}
	return opts, nil
}

// noArgs refuses any argument of a command that takes none.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes flags only", args[0], c.CommandPath())
	}
	return nil
}

// oneBoundary is the arguments of a command that names one boundary.
func oneBoundary(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("name one boundary, e.g. %s default", c.CommandPath())
	}
	return nil
}

// serverNote ends the help of every client command; eventsNote that of
// the commands that print events.
const (
	serverNote = `
The node is -s/--server, else $ORISUN_URL, else $NATS_URL, else ` + "nats://127.0.0.1:4222" + `.`
	eventsNote = `
Events print one per line as "position type id time data"; --json prints
the event JSON instead.`
)

// appendCommand is `orisun append <boundary>`: one event from the flags,
// or JSON lines from stdin, optionally under a condition.
func appendCommand() *cobra.Command {
	var (
		cf clientFlags
		af appendFlags
	)
	c := &cobra.Command{
		Use:   "append <boundary>",
		Short: "append events: one from flags, or JSON lines from stdin",
		Long: `Appends events to a boundary: one given by --type and --data, or, without
--type, one per line of standard input as JSON ({"type":…,"data":…}).

With --if-none-after N the append is refused with a conflict (exit 4) if an
event matching --query-types/--query-tags (any event, without them) is
after position N: take N from the head orisun latest printed.

Without --id the id is generated, so running the command twice appends
twice; give --id (a UUID) to make a retry idempotent.
` + serverNote,
		Example: `  orisun append default --type order.placed --data '{"order":42}' --tags order:42
  echo '{"type":"order.paid","data":{"order":42}}' | orisun append default
  orisun append default --type order.cancelled --data '{"order":42}' --if-none-after 17 --query-tags order:42`,
		Args: oneBoundary,
		RunE: func(cmd *cobra.Command, args []string) error {
			af.conditional = cmd.Flags().Changed("if-none-after")
			if !af.conditional && af.query.query() != nil {
				return usageErr("--query-types/--query-tags make a condition and need --if-none-after N (the head orisun latest printed)")
			}
			if af.typ != "" && af.data == "" {
				return usageErr(`--data is required with --type (a JSON value, e.g. --data '{"order":42}')`)
			}
			if af.typ == "" {
				// Without --type the events come from stdin: an event's
				// flags would be ignored, and the command would wait on a
				// terminal for lines nobody meant to type.
				var given []string
				for _, f := range []string{"data", "metadata", "tags", "id"} {
					if cmd.Flags().Changed(f) {
						given = append(given, "--"+f)
					}
				}
				if len(given) > 0 {
					return usageErr("%s without --type: give --type for one event, or leave them out to read JSON lines from stdin", strings.Join(given, ", "))
				}
				if interactive(stdin) {
					fmt.Fprintln(cmd.ErrOrStderr(), `orisun append: reading events from stdin, one JSON object per line ({"type":…,"data":…}); end with Ctrl-D`)
				}
			}
			evs, err := af.events()
			if err != nil {
				return exit(exitUsage, err)
			}
			if err := checkJSON(evs); err != nil {
				return err
			}
			return cf.run(cmd, func(s *session) error {
				res, err := s.c.Append(s.ctx, args[0], evs, af.condition())
				if err != nil {
					return s.fail(err, args[0])
				}
				if cf.json {
					writeJSON(s.w, res)
				} else {
					fmt.Fprintf(s.w, "appended positions %d–%d (epoch %s)\n", res.First, res.Last, res.Epoch)
				}
				return nil
			})
		},
	}
	af.add(c.Flags())
	addClientFlags(c, &cf)
	return c
}

// appendFlags are the flags of `orisun append`: one event, and a condition.
type appendFlags struct {
	typ, data, metadata, tags, id string
	ifNoneAfter                   uint64
	query                         queryFlags
	// conditional is whether --if-none-after was given (0 is a position).
	conditional bool
}

func (af *appendFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&af.typ, "type", "", "event type (without it, events are read as JSON lines from stdin)")
	fs.StringVar(&af.data, "data", "", "event data, a JSON value")
	fs.StringVar(&af.metadata, "metadata", "", "event metadata, a JSON value")
	fs.StringVar(&af.tags, "tags", "", "comma-separated tags")
	fs.StringVar(&af.id, "id", "", "event id (a UUID; default: generated, so a retry of this command appends again)")
	fs.Uint64Var(&af.ifNoneAfter, "if-none-after", 0, "append only if no event matching --query-types/--query-tags is after this position (the head that orisun latest printed)")
	af.query.add(fs, "of the condition's query")
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

// interactive reports whether r is a terminal: a character device other
// than /dev/null. (Without a dependency for isatty: a false positive, such
// as stdin from /dev/zero, only prints the note.)
func interactive(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
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
func checkJSON(evs []event.Input) error {
	for _, e := range evs {
		if e.Data != nil && !json.Valid(e.Data) {
			return usageErr(`--data is not valid JSON (quote strings: --data '"text"')`)
		}
		if e.Metadata != nil && !json.Valid(e.Metadata) {
			return usageErr(`--metadata is not valid JSON (e.g. --metadata '{"by":"cli"}')`)
		}
	}
	return nil
}

// readCommand is `orisun read <boundary>`: one page of events.
func readCommand() *cobra.Command {
	var (
		cf        clientFlags
		after     uint64
		before    uint64
		backwards bool
		limit     int
		qf        queryFlags
	)
	c := &cobra.Command{
		Use:   "read <boundary>",
		Short: "print a page of a boundary's events",
		Long: `Prints the events of a boundary after a position, at most --limit of them:
every event, or with --query-types/--query-tags the ones that match.
With --backwards, the newest first: the events before --before (without
it, from the head); the next page is before the last position printed.
` + serverNote + eventsNote,
		Example: `  orisun read default --after 0 --limit 10
  orisun read default --json
  orisun read default --query-tags order:42
  orisun read default --backwards --limit 20     # the 20 newest
  orisun read default --backwards --before 981   # the page before position 981`,
		Args: oneBoundary,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case backwards && after != 0:
				return usageErr("--after %d is for a forward read; with --backwards, name the page by --before (default: from the head)", after)
			case !backwards && before != 0:
				return usageErr("--before %d is for a backward read: add --backwards, or use --after for a forward read", before)
			}
			return cf.run(cmd, func(s *session) error {
				read, from := s.c.Read, after
				if backwards {
					read, from = s.c.ReadBackward, before
				}
				res, err := read(s.ctx, args[0], from, limit, qf.query())
				if err != nil {
					return s.fail(err, args[0])
				}
				for i := range res.Events {
					printEvent(s.w, &res.Events[i], cf.json)
				}
				return nil
			})
		},
	}
	c.Flags().Uint64Var(&after, "after", 0, "read the events after this position")
	c.Flags().BoolVar(&backwards, "backwards", false, "read newest first, before --before")
	c.Flags().Uint64Var(&before, "before", 0, "with --backwards: read the events before this position (default: from the head)")
	c.Flags().IntVar(&limit, "limit", readLimitDefault, fmt.Sprintf("most events to read (1–%d)", api.MaxReadLimit))
	qf.add(c.Flags(), "of the query")
	addClientFlags(c, &cf)
	return c
}

// latestCommand is `orisun latest <boundary>`: the head and the latest
// matching event, the context of a decision.
func latestCommand() *cobra.Command {
	var (
		cf clientFlags
		qf queryFlags
	)
	c := &cobra.Command{
		Use:   "latest <boundary>",
		Short: "print the head and the latest matching event: a decision's context",
		Long: `Prints the boundary's head and its latest event matching the query
(--query-types/--query-tags; without them, the latest event): append with
--if-none-after HEAD and the same query to act on what was seen.
` + serverNote + eventsNote,
		Example: `  orisun latest default --query-tags order:42`,
		Args:    oneBoundary,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.run(cmd, func(s *session) error {
				l, err := s.c.ReadLatest(s.ctx, args[0], qf.query())
				if err != nil {
					return s.fail(err, args[0])
				}
				if cf.json {
					writeJSON(s.w, l)
					return nil
				}
				fmt.Fprintf(s.w, "head %d\tepoch %s\n", l.Head, l.Epoch)
				if l.Event == nil {
					fmt.Fprintln(s.w, "no matching event")
				} else {
					printEvent(s.w, l.Event, false)
				}
				return nil
			})
		},
	}
	qf.add(c.Flags(), "of the query")
	addClientFlags(c, &cf)
	return c
}

// tailCommand is `orisun tail <boundary>`: catch up, then follow until
// SIGINT or SIGTERM, one event per line.
func tailCommand() *cobra.Command {
	var (
		cf    clientFlags
		after uint64
		isNew bool
	)
	c := &cobra.Command{
		Use:   "tail <boundary>",
		Short: "print a boundary's events, then follow new ones until Ctrl-C",
		Long: `Prints the events of a boundary after a position (every event, without
--after), then follows it: each event appended later is printed as it comes,
in order and once, until SIGINT (Ctrl-C) or SIGTERM. --new follows only the
events appended from now on.
` + serverNote + eventsNote,
		Example: `  orisun tail default                # every event, then follow
  orisun tail default --after 17     # from position 18 on
  orisun tail default --new --json   # only new events, as JSON`,
		Args: oneBoundary,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("from") {
				fmt.Fprintln(cmd.ErrOrStderr(), "orisun tail: --from is deprecated; use --after, which means the same: the events after that position")
			}
			if isNew && (cmd.Flags().Changed("after") || cmd.Flags().Changed("from")) {
				return usageErr("--new and --after exclude each other: --new starts after the head")
			}
			return cf.run(cmd, func(s *session) error {
				if isNew {
					l, err := s.c.ReadLatest(s.ctx, args[0], nil)
					if err != nil {
						return s.fail(err, args[0])
					}
					after = l.Head
				}
				ctx, stop := signal.NotifyContext(s.ctx, syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				err := s.c.Subscribe(ctx, args[0], after, func(_ context.Context, e event.Event) error {
					printEvent(s.w, &e, cf.json)
					// Each line is visible at once: tail is read by people and pipes.
					return s.w.Flush()
				}, client.SubscribeOptions{})
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return nil
				}
				return s.fail(err, args[0])
			})
		},
	}
	fs := c.Flags()
	fs.Uint64Var(&after, "after", 0, "print the events after this position, then follow")
	fs.BoolVar(&isNew, "new", false, "follow only the events appended from now on")
	// --from was tail's name for --after; it meant "after" then too. It
	// still works, hidden, and says so on stderr (cobra's own deprecation
	// notice would go to the output, in the middle of the events).
	fs.Uint64Var(&after, "from", 0, "the old name of --after")
	_ = fs.MarkHidden("from")
	addClientFlags(c, &cf)
	return c
}

// boundariesCommand is `orisun boundaries`: list the boundaries, or create
// one.
func boundariesCommand() *cobra.Command {
	var (
		cf     clientFlags
		create string
	)
	c := &cobra.Command{
		Use:   "boundaries",
		Short: "list the boundaries, or create one",
		Long: `Lists the boundaries: name, head and epoch. --create NAME creates one
(names match ^[a-z][a-z0-9_]{0,62}$); creating one that exists is no error.
` + serverNote,
		Example: `  orisun boundaries
  orisun boundaries --create orders`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf.creds.asAdmin = create != ""
			return cf.run(cmd, func(s *session) error {
				var bs []event.Boundary
				var err error
				if create != "" {
					b, err := s.c.CreateBoundary(s.ctx, create)
					if errors.Is(err, nats.ErrPermissionViolation) {
						return exit(exitFailure, fmt.Errorf("the NATS server refused to create boundary %q (%v): creating a boundary needs the admin's "+
							"credentials; set ORISUN_NATS_ADMIN_USER and ORISUN_NATS_ADMIN_PASSWORD (or ORISUN_NATS_ADMIN_TOKEN) as the server has "+
							"them, or pass the admin's --user and --password (or --token)", create, nats.ErrPermissionViolation))
					}
					if err != nil {
						return s.fail(err, create)
					}
					bs = []event.Boundary{b}
				} else if bs, err = s.c.Boundaries(s.ctx); err != nil {
					return s.fail(err, "")
				}
				for _, b := range bs {
					if cf.json {
						writeJSON(s.w, b)
					} else {
						fmt.Fprintf(s.w, "%s\thead %d\tepoch %s\n", b.Name, b.Head, b.Epoch)
					}
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&create, "create", "", "create this boundary (with credentials configured, the admin's: "+
		"ORISUN_NATS_ADMIN_USER/ORISUN_NATS_ADMIN_PASSWORD or ORISUN_NATS_ADMIN_TOKEN when set, else --user/--password or --token)")
	addClientFlags(c, &cf)
	return c
}

// session is a client command's connection to the node and its buffered
// output.
type session struct {
	ctx context.Context
	c   *client.Client
	w   *bufio.Writer
	url string
}

// run connects as the flags say (open), runs fn with the session and
// closes it: what each client sub-command does around its requests.
func (cf *clientFlags) run(cmd *cobra.Command, fn func(s *session) error) error {
	s, err := cf.open("orisun-cli", cmd.OutOrStdout())
	if err != nil {
		return err
	}
	defer s.close()
	return fn(s)
}

// open connects as the flags say: a usage error for bad credential flags,
// unavailable when the node cannot be reached.
func (cf *clientFlags) open(name string, stdout io.Writer) (*session, error) {
	copts, err := cf.creds.options()
	if err != nil {
		return nil, exit(exitUsage, err)
	}
	url := cf.url()
	c, err := client.Connect(url, append(copts, client.Name(name), client.Timeout(cf.timeout))...)
	if err != nil {
		return nil, connectError(url, err)
	}
	return &session{ctx: context.Background(), c: c, w: bufio.NewWriter(stdout), url: url}, nil
}

// The hints of a failed command, each said after "; " on the error's line.
const (
	hintServer = "is orisun running there? set -s/--server, ORISUN_URL or NATS_URL to its NATS URL"
	hintLogin  = "log in with --user and --password, --token or --creds (or ORISUN_NATS_USER and ORISUN_NATS_PASSWORD, ORISUN_NATS_TOKEN, NATS_CREDS)"
)

// connectError is a failed connect to url, in one line: refused
// credentials are a failure with the ways to log in; anything else means
// the node is unavailable. The client's own context ("orisun client:
// connect to …") is left out: the line names the URL.
func connectError(url string, err error) error {
	return exit(connectProblem(url, err))
}

// connectProblem is connectError's exit status and message.
func connectProblem(url string, err error) (int, error) {
	cause := err
	if u := errors.Unwrap(err); u != nil {
		cause = u
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return exitFailure, fmt.Errorf("%s refused the login: %v; %s", url, cause, hintLogin)
	}
	return exitUnavailable, fmt.Errorf("cannot connect to %s: %v; %s", url, cause, hintServer)
}

// close writes out what is buffered and closes the connection.
func (s *session) close() {
	s.w.Flush()
	s.c.Close()
}

// queryFlags are --query-types and --query-tags: a one-item query.
type queryFlags struct{ types, tags string }

// add adds the flags; what says what the query selects.
func (q *queryFlags) add(fs *pflag.FlagSet, what string) {
	fs.StringVar(&q.types, "query-types", "", "comma-separated event types "+what+": an event of any of them matches")
	fs.StringVar(&q.tags, "query-tags", "", "comma-separated tags "+what+": an event with all of them matches")
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

// fail turns a failed request into the exit status of its code and one
// line: the API's code and message ("conflict: …"), without the client's
// wrapping, and what to do, after "; ", where that is clear. boundary is
// the one the command named ("" for none).
func (s *session) fail(err error, boundary string) error {
	if err == nil {
		return nil
	}
	code := api.CodeOf(err)
	var apiErr *api.Error
	answered := errors.As(err, &apiErr)
	if answered {
		err = apiErr
	}
	switch code {
	case api.CodeConflict:
		return exit(exitConflict, err)
	case api.CodeInvalid, api.CodeTooLarge:
		return exit(exitInvalid, err)
	case api.CodeNotFound:
		if boundary != "" && strings.Contains(err.Error(), "does not exist") {
			// The node's "create it first" becomes how.
			err = fmt.Errorf("%s; create it with orisun boundaries --create %s (with access control on, as the NATS admin: "+
				"ORISUN_NATS_ADMIN_USER and ORISUN_NATS_ADMIN_PASSWORD, or ORISUN_NATS_ADMIN_TOKEN)",
				strings.TrimSuffix(err.Error(), "; create it first"), boundary)
		}
		return exit(exitNotFound, err)
	case api.CodeUnavailable:
		switch {
		case answered:
			// The node answered: it is there, but cannot serve now.
			return exit(exitUnavailable, fmt.Errorf("%w; orisun status says what fails on the node", err))
		case errors.Is(err, nats.ErrNoResponders):
			return exit(exitUnavailable, fmt.Errorf("no orisun node answers on %s: its NATS server is there, but nothing serves orisun's API; "+
				"is orisun running, and is this its NATS? set -s/--server, ORISUN_URL or NATS_URL to its NATS URL", s.url))
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return exit(exitUnavailable, fmt.Errorf("no answer from %s within the timeout (--timeout); send the request again", s.url))
		case errors.Is(err, nats.ErrConnectionClosed):
			return exit(exitUnavailable, fmt.Errorf("the connection to %s closed; %s", s.url, hintServer))
		}
		return exit(exitUnavailable, fmt.Errorf("%s: %w; %s", s.url, err, hintServer))
	}
	if errors.Is(err, nats.ErrPermissionViolation) {
		return exit(exitFailure, fmt.Errorf("%w; the server's credentials for this user do not allow it (docs/security.md)", err))
	}
	return exit(exitFailure, err)
}
