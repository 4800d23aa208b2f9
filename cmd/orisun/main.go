// Command orisun relays an event log from a durable store into NATS
// JetStream. With no configuration it runs on SQLite in ./data with an
// embedded NATS server on 127.0.0.1:4222. Configuration comes from ORISUN_*
// environment variables (see README.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kelseyhightower/envconfig"

	"github.com/orisun-io/orisun"
)

// faultHooks is set only by faultinject.go, which is compiled with
// -tags faultinject (the binary of the fault tests in internal/faults): it
// returns node options (fault points, history recording) and a function run
// once the node has started. A release build leaves it nil and ignores every
// ORISUN_FAULT_* variable.
var faultHooks func(log *slog.Logger) (opts []orisun.Option, started func(ctx context.Context, n *orisun.Node))

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd, rest := "serve", args
	if len(args) > 0 {
		cmd, rest = args[0], args[1:]
	}
	c, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "orisun: unknown command %q\n\n", cmd)
		usage(stderr)
		return 2
	}
	return c(rest, stdout, stderr)
}

// A command runs one sub-command with the arguments after its name and
// returns the exit code.
type command func(args []string, stdout, stderr io.Writer) int

// commands are the sub-commands by name (usage lists them).
var commands = map[string]command{
	"serve":       serveCmd,
	"append":      appendCmd,
	"read":        readCmd,
	"latest":      latestCmd,
	"tail":        tailCmd,
	"boundaries":  boundariesCmd,
	"status":      statusCmd,
	"healthcheck": healthcheckCmd,
	"bench":       benchCmd,
	"version":     versionCmd,
	"--version":   versionCmd,
	"-v":          versionCmd,
	"help":        helpCmd,
	"--help":      helpCmd,
	"-h":          helpCmd,
}

// serveCmd is `orisun serve`, the relay; it takes no arguments (and
// ignores any).
func serveCmd(_ []string, _, stderr io.Writer) int { return serve(stderr) }

func versionCmd(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintln(stdout, "orisun", version)
	return 0
}

func helpCmd(_ []string, stdout, _ io.Writer) int {
	usage(stdout)
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage: orisun [command]

Commands:
  serve       run the relay (the default)
  append      append events: orisun append <boundary> --type T --data '{…}' [--tags a,b] [--id UUID] [--metadata '{…}']
              or, without --type, events as JSON lines on stdin ({"type":…,"data":…} per line)
              with a condition: --if-none-after N [--query-types a,b] [--query-tags x,y]
              (refused with a conflict if a matching event is after position N)
  read        print events: orisun read <boundary> [--after N] [--limit N] [--query-types a,b] [--query-tags x,y] [--json]
  latest      print the head and the latest matching event, the context of a decision:
              orisun latest <boundary> [--query-types a,b] [--query-tags x,y] [--json]
  tail        catch up, then follow until Ctrl-C: orisun tail <boundary> [--from N] [--json]
  boundaries  list boundaries, or create one: orisun boundaries [--create name] [--json]
  status      print a node's status: orisun status [--http host:port | --server URL] [--json] [--wait-settled[=timeout]]
  healthcheck exit 0 when the node is ready (GET /readyz answers 200), else 1: orisun healthcheck [--http host:port]
  bench       measure throughput, latency and resource use against the machine's limits on a fresh store:
              orisun bench [--backend sqlite|postgres] [--pg-url URL] [--events N] [--rates 1000,5000] [--only relay,…] [--json]
              (orisun bench --help lists every flag; see docs/performance.md)
  version     print the version
  help        show this help

The client commands (append, read, latest, tail, boundaries) talk to a running
orisun over NATS: --server URL, or the environment variable ORISUN_URL,
default %s. status reads the node's status listener
(--http, or ORISUN_HTTP_ADDR, default %s), or NATS with --server. Events print one per line as
"position type id time data"; --json prints the event JSON instead.

serve is configured by ORISUN_* environment variables; see README.md.
`, defaultURL, orisun.HTTPAddrDefault)
}

// loadConfig reads the environment into the node configuration: it starts
// from orisun.Defaults, and envconfig replaces the field of every variable
// that is set and leaves the others alone. Where zero or empty means
// something (ORISUN_NATS_EVENT_STREAM_MAX_MSGS=0: no limit;
// ORISUN_HTTP_ADDR=: no listener; ORISUN_BOUNDARIES=: none) a variable set
// so is that value; for the other fields the node reads zero as "the
// default" (Config's field docs), as it always has.
func loadConfig() (orisun.Config, error) {
	cfg := orisun.Defaults()
	if err := envconfig.Process("ORISUN", &cfg); err != nil {
		return cfg, fmt.Errorf("configuration: %w", err)
	}
	return cfg, cfg.Validate()
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

func serve(stderr io.Writer) int {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "orisun: %v\n", err)
		return 2
	}
	log := newLogger(cfg, stderr).With("version", version)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	opts := []orisun.Option{orisun.WithLogger(log), orisun.WithVersion(version)}
	var started func(context.Context, *orisun.Node)
	if faultHooks != nil {
		more, fn := faultHooks(log)
		opts, started = append(opts, more...), fn
	}
	n, err := orisun.New(cfg, opts...)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	if err := n.Start(ctx); err != nil {
		log.Error("start failed", "err", err)
		return 1
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
		return 1
	}
	return 0
}
