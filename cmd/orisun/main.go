// Command orisun relays an event log from a durable store into NATS
// JetStream. With no configuration it runs on SQLite in ./data with an
// embedded NATS server on 127.0.0.1:4222. Configuration comes from ORISUN_*
// environment variables (orisun env lists them; README.md says more).
//
// The commands are built with cobra (github.com/spf13/cobra): per-command
// help (orisun help append, orisun append --help), GNU long flags
// (--flag value, --flag=value), "did you mean" for commands, and shell
// completion, as kubectl and gh have them. main.go holds the root, serve,
// version and env, and the exit statuses; cli.go the client commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/orisun-io/orisun"
)

// faultHooks is set only by faultinject.go, which is compiled with
// -tags faultinject (the binary of the fault tests in internal/faults): it
// returns node options (fault points, history recording) and a function run
// once the node has started. A release build leaves it nil and ignores every
// ORISUN_FAULT_* variable.
var faultHooks func(log *slog.Logger) (opts []orisun.Option, started func(ctx context.Context, n *orisun.Node))

// version is set at build time with -ldflags "-X main.version=…"; when it
// is not, versionString reads the module version and the VCS revision the
// go command stamped into the binary.
var version = ""

// Exit statuses of every command (orisun help lists them).
const (
	exitOK          = 0
	exitFailure     = 1 // any other failure; status --wait-settled: not settled in time
	exitUsage       = 2 // bad flags or arguments; serve: an invalid configuration
	exitUnavailable = 3 // the node cannot be reached, or answered "unavailable"
	exitConflict    = 4 // append: the condition failed, or an id is stored with other content
	exitInvalid     = 5 // the node refused the request as invalid or too large
	exitNotFound    = 6 // no such boundary
)

const exitText = `Exit status:
  0  success
  1  any other failure (status --wait-settled: not settled in time)
  2  usage: bad flags or arguments; serve: an invalid configuration
  3  unavailable: the node cannot be reached, or answered "unavailable"
  4  conflict: the append's condition failed, or its id is stored with other content
  5  invalid: the node refused the request as invalid or too large
  6  not found: no such boundary`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// cmdError is how a command ends with an exit status of its own; its
// message, if any, has the command's name put before it.
type cmdError struct {
	code int
	err  error // nil when the command printed what there was to say
}

func (e *cmdError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// exit ends a command with code, saying err (nil: nothing more to say).
func exit(code int, err error) error { return &cmdError{code: code, err: err} }

// usageErr is a usage error of a command's own checks.
func usageErr(format string, args ...any) error {
	return exit(exitUsage, fmt.Errorf(format, args...))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(normalizeArgs(args, flagNames(root)))
	c, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	name := "orisun"
	if c != nil {
		name = c.CommandPath()
	}
	var ce *cmdError
	if errors.As(err, &ce) {
		if ce.err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, ce.err)
			if ce.code == exitUsage {
				fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
			}
		}
		return ce.code
	}
	// Cobra's and pflag's own: an unknown command or flag, a flag's bad
	// value, a wrong number of arguments.
	fmt.Fprintf(stderr, "%s: %v\n", name, strings.TrimRight(err.Error(), "\n"))
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
	return exitUsage
}

// optionalValue are the flags whose value may be left out; given as the
// next argument ("--wait-settled 2m") it is theirs when it reads as one,
// since pflag takes a value of such a flag only after "=". A bare number
// ("--wait-settled 5") is theirs too, so that the flag says it lacks a
// unit rather than the command refusing an argument "5".
var optionalValue = map[string]func(string) bool{
	"--wait-settled": func(s string) bool {
		_, err := strconv.ParseFloat(s, 64)
		return err == nil || (&waitFlag{}).Set(s) == nil
	},
}

// normalizeArgs joins an optional value given as the next argument to its
// flag ("--wait-settled 2m" becomes "--wait-settled=2m"), and gives a long
// flag written with one dash, as Go's flag package took it ("-server"),
// its two dashes: pflag would read it as -s with the value "erver". The
// value of a flag that takes one is left as it is ("--tags -new" stays:
// -new is the tags, not a flag). flags are the flags' names, long and
// short, each with whether it takes a value. Nothing after "--" is
// touched.
func normalizeArgs(args []string, flags map[string]bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, withValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, known := flags[name]; known && len(name) > 1 && a[0] == '-' && !strings.HasPrefix(a, "--") {
			a = "-" + a
		}
		if ok := optionalValue[a]; ok != nil && i+1 < len(args) && ok(args[i+1]) {
			out = append(out, a+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
		// "--name" or "-n" without "=": the next argument is its value.
		long := strings.HasPrefix(a, "--")
		if strings.HasPrefix(a, "-") && !withValue && i+1 < len(args) && flags[name] && (long || len(name) == 1) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// flagNames are the names of every command's flags, long and short, each
// with whether it takes a value (a bool or an optional value does not).
func flagNames(root *cobra.Command) map[string]bool {
	names := map[string]bool{"help": false, "h": false, "version": false, "v": false}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			names[f.Name] = f.NoOptDefVal == ""
			if f.Shorthand != "" {
				names[f.Shorthand] = f.NoOptDefVal == ""
			}
		})
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
	return names
}

// newRoot builds the command tree. Without a command orisun serves.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "orisun",
		Short: "relay an event log from a durable store into NATS JetStream",
		Long: `orisun relays an event log from a durable store (SQLite or PostgreSQL) into
NATS JetStream, and is a client of a running orisun.

Without a command it runs the relay (orisun serve), configured by ORISUN_*
environment variables: orisun env lists them with their defaults.

The client commands (append, read, latest, tail, boundaries) talk to a
running orisun over NATS: -s/--server URL, or ORISUN_URL, or NATS_URL,
default ` + defaultURL + `.

` + exitText,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// No Args: cobra's own check of the root's arguments says "unknown
		// command" with the commands that are close.
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.ErrOrStderr())
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("orisun {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(serveCommand(), versionCommand(), envCommand(),
		appendCommand(), readCommand(), latestCommand(), tailCommand(), boundariesCommand(),
		statusCommand(), healthcheckCommand(), benchCommand())
	// cobra's help and completion commands, made now to say them in the
	// voice of the others (lower case) and to make an unknown help topic
	// a usage error: cobra prints the root's usage and exits 0.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "print the help of a command"
			show := c.Run
			c.Run = nil
			c.RunE = func(c *cobra.Command, args []string) error {
				if found, _, err := c.Root().Find(args); found == nil || err != nil {
					msg := fmt.Sprintf("unknown help topic %q", strings.Join(args, " "))
					if len(args) > 0 {
						if s := c.Root().SuggestionsFor(args[0]); len(s) > 0 {
							msg += "; did you mean " + strings.Join(s, " or ") + "?"
						}
					}
					return usageErr("%s (orisun help lists the commands)", msg)
				}
				show(c, args)
				return nil
			}
		case "completion":
			c.Short = "print the shell completion script for bash, zsh, fish or powershell"
			for _, sub := range c.Commands() {
				sub.Short = strings.ToLower(sub.Short[:1]) + sub.Short[1:]
			}
		}
	}
	return root
}

// flagError makes pflag's error about a flag a usage error, with the
// flag that was probably meant.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return err
	}
	var best string
	bestDist := 3 // at most two edits
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		if d := editDistance(name, f.Name); d < bestDist || (strings.HasPrefix(f.Name, name) && best == "") {
			best, bestDist = f.Name, min(d, bestDist)
		}
	})
	if best == "" {
		return err
	}
	return fmt.Errorf("%s; did you mean --%s?", msg, best)
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of neighbours.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range len(b) + 1 {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func serveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "run the relay (the default)",
		Long: `Runs the relay: the store, the embedded NATS server (or an existing NATS),
one lease-holding publisher per boundary, the NATS API and the status
listener, until SIGINT or SIGTERM (a second signal kills it at once).

It takes no flags: it is configured by ORISUN_* environment variables, each
optional; orisun env lists every one with its default and meaning. An
invalid value stops it before it starts (exit 2) with the variable, the
value, what is allowed and the fix; a variable it does not know is named
in a warning at start, with the closest one it knows.`,
		Example: `  orisun serve
  ORISUN_BACKEND=postgres ORISUN_PG_URL=postgres://orisun@db:5432/orisun orisun serve`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.ErrOrStderr()) },
	}
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Long: `Prints the version: the one set at build time (-ldflags "-X main.version=…",
as the Docker image does), else the module version and VCS revision the go
command recorded in the binary, then the Go version and platform.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "orisun %s (%s, %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// versionString is the version set at build time, else the one the go
// command recorded: the module's version (v1.2.3 for go install …@v1.2.3,
// a pseudo-version in a git checkout) with the VCS revision when the
// version does not hold it, "+dirty" for uncommitted changes.
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if v == "" || v == "(devel)" {
		v = "(devel)"
		if rev != "" {
			v += " " + rev
			if modified == "true" {
				v += "+dirty"
			}
		}
	}
	return v
}

// loadConfig reads the environment into the node configuration: it starts
// from orisun.Defaults, and each variable that is set replaces its field
// (parseEnv). Where zero or empty means something
// (ORISUN_NATS_EVENT_STREAM_MAX_MSGS=0: no limit; ORISUN_HTTP_ADDR=: no
// listener; ORISUN_BOUNDARIES=: none) a variable set so is that value; for
// the other fields the node reads zero as "the default" (Config's field
// docs), as it always has.
func loadConfig() (orisun.Config, error) {
	cfg := orisun.Defaults()
	// A value that is not of its kind leaves its field at the default, so
	// the other fields are still checked: every problem is told at once.
	err := parseEnv(&cfg)
	return cfg, errors.Join(err, cfg.Validate())
}

func newLogger(cfg orisun.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(cfg.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(cfg.LogFormat, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func serve(stderr io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "orisun: %s\n", line)
		}
		fmt.Fprintln(stderr, "orisun: the configuration is invalid; orisun env lists every variable, its default and meaning")
		return exit(exitUsage, nil)
	}
	v := versionString()
	log := newLogger(cfg, stderr).With("version", v)
	for _, u := range unknownVariables(os.Environ()) {
		log.Warn(u.message(), "variable", u.name)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	opts := []orisun.Option{orisun.WithLogger(log), orisun.WithVersion(v)}
	var started func(context.Context, *orisun.Node)
	if faultHooks != nil {
		more, fn := faultHooks(log)
		opts, started = append(opts, more...), fn
	}
	n, err := orisun.New(cfg, opts...)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return exit(exitUsage, nil)
	}
	if err := n.Start(ctx); err != nil {
		log.Error("start failed", "err", err)
		return exit(exitFailure, nil)
	}
	if started != nil {
		started(ctx, n)
	}
	<-ctx.Done()
	// A second SIGINT or SIGTERM kills the process at once, should the
	// shutdown hang (a subscription handler that ignores its context).
	stop()
	log.Info("shutting down: publishers finish what they have in flight and write their checkpoint (signal again to kill)")
	if err := n.Stop(); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("shutdown", "err", err)
		return exit(exitFailure, nil)
	}
	return nil
}
