package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/orisun-io/orisun/bench"
)

// benchCommand runs `orisun bench`: the workloads of package bench against
// an in-process node on a fresh store, with the reference limits of the
// machine measured in the same run (docs/performance.md).
func benchCommand() *cobra.Command {
	cfg := bench.Defaults()
	var (
		asJSON     bool
		quiet      bool
		rates      = intList(cfg.Rates)
		callers    = intList(cfg.Callers)
		only       string
		cpuprofile string
		memprofile string
		logLevel   string
		saved      string
		msgID      = false
	)
	c := &cobra.Command{
		Use:   "bench",
		Short: "measure throughput, latency and resource use on a fresh store",
		Long: `Runs the standard workloads on an in-process node against a fresh store (a
temporary SQLite directory, or a database orisun_bench_<random> it creates
on the --pg-url server and drops afterwards), measures the machine's limits
with orisun's code removed in the same run, and prints each figure with its
ratio to its limit (docs/performance.md). A default run takes several
minutes; Ctrl-C stops it and cleans up.`,
		Example: `  orisun bench
  orisun bench --backend postgres --pg-url postgres://postgres@127.0.0.1:5432/postgres
  orisun bench --only relay --events 200000 --cpuprofile relay.prof --json > relay.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cfg, benchOptions{asJSON, quiet, rates, callers, only, cpuprofile, memprofile, logLevel, saved, msgID},
				cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.StringVar(&cfg.Backend, "backend", cfg.Backend, "store: sqlite or postgres")
	// No default from ORISUN_PG_URL: that is the node's own store, maybe a
	// production one, and the bench loads the server it is given.
	fs.StringVar(&cfg.PGURL, "pg-url", "", "PostgreSQL server URL, required with --backend postgres; a fresh database orisun_bench_<random> is created on it, loaded and dropped after")
	fs.StringVar(&cfg.Dir, "dir", "", "data directory (must be empty or missing; default: a temporary directory, removed after)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fs.IntVar(&cfg.Events, "events", cfg.Events, "backlog of the relay, catch-up and raw read/publish measurements")
	fs.IntVar(&cfg.EventBytes, "event-bytes", cfg.EventBytes, "bytes of JSON data per event")
	fs.DurationVar(&cfg.AppendDuration, "append-duration", cfg.AppendDuration, "duration of each append row and of the raw insert")
	fs.DurationVar(&cfg.LatencyDuration, "duration", cfg.LatencyDuration, "duration of each fixed-rate latency row and of the busy scale row")
	fs.Var(&rates, "rates", "fixed rates of the latency rows, events/s, comma-separated")
	fs.Var((*intList)(&cfg.OutboxRates), "outbox-rates", "fixed rates of the outbox workload's latency rows (application transactions calling orisun_enqueue, PostgreSQL), events/s, comma-separated")
	fs.Var(&callers, "callers", "concurrent callers of the single-event append rows, comma-separated")
	fs.IntVar(&cfg.APIBoundaries, "api-boundaries", cfg.APIBoundaries, "boundaries the api workload's row of spread callers sends to (the most of --callers, caller i to boundary i mod this; 1: no such row)")
	fs.StringVar(&only, "only", "", "run only these workloads, comma-separated: "+strings.Join(bench.Workloads, ","))
	fs.IntVar(&cfg.ScaleBoundaries, "scale-boundaries", cfg.ScaleBoundaries, "boundaries of the scale workload")
	fs.IntVar(&cfg.ScaleBusy, "scale-busy", cfg.ScaleBusy, "busy boundaries among them")
	fs.IntVar(&cfg.ScaleRate, "scale-rate", cfg.ScaleRate, "events/s of each busy boundary")
	fs.DurationVar(&cfg.ScaleIdle, "scale-idle", cfg.ScaleIdle, "idle window of the scale workload")
	fs.Int64Var(&cfg.StreamMaxBytes, "stream-max-bytes", cfg.StreamMaxBytes, "byte limit of every event stream (JetStream reserves it in memory per stream)")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (with the api workload: the node's process)")
	fs.StringVar(&memprofile, "memprofile", "", "write the allocations of the whole run (a pprof allocs profile) to this file at its end (with the api workload: the node's process)")
	fs.StringVar(&cfg.RowCPUProfiles, "row-cpuprofiles", "", "write a CPU profile of the node's process over each append row of the api workload to `DIR`/api-N.prof, N numbering those rows from 1 (DIR is made if missing and must be empty; not with --cpuprofile)")
	fs.StringVar(&cfg.ClientCPUProfile, "client-cpuprofile", "", "write a CPU profile of the api workload's client process to this file")
	fs.BoolVar(&msgID, "msg-id", msgID, "give every message Nats-Msg-Id, as ORISUN_NATS_MSG_ID=true does (the node's default is without)")
	fs.StringVar(&saved, "report", "", "print the report saved by an earlier --json run in this file as text, and run nothing")
	fs.StringVar(&logLevel, "log-level", "error", "level of the node's logs on stderr: debug, info, warn or error")
	c.AddCommand(benchClientCommand())
	return c
}

// benchClientCommand is the api workload's client process: this binary
// again, started by orisun bench itself, hidden from help.
func benchClientCommand() *cobra.Command {
	return &cobra.Command{
		Use:                bench.ClientArg,
		Short:              "the api workload's client process (started by orisun bench)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := bench.ClientMain(args, os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				return exit(code, fmt.Errorf("bench %s failed", bench.ClientArg))
			}
			return nil
		},
	}
}

// benchOptions are the flags of orisun bench that are not bench.Config's.
type benchOptions struct {
	asJSON, quiet    bool
	rates, callers   intList
	only, cpuprofile string
	memprofile       string
	logLevel, saved  string
	msgID            bool
}

func runBench(cfg bench.Config, o benchOptions, stdout, stderr io.Writer) error {
	asJSON, rates, callers, only, cpuprofile, logLevel := o.asJSON, o.rates, o.callers, o.only, o.cpuprofile, o.logLevel
	if o.saved != "" {
		return printSaved(o.saved, stdout)
	}
	cfg.Rates, cfg.Callers, cfg.MsgID = rates, callers, o.msgID
	cfg.Version = versionString()
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return usageErr("--log-level %q: use debug, info, warn or error", logLevel)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if !o.quiet {
		cfg.Progress = stderr
	}
	if cfg.RowCPUProfiles != "" && cpuprofile != "" {
		return usageErr("--row-cpuprofiles and --cpuprofile: a process takes one CPU profile at a time; give one of them")
	}
	if err := cfg.Validate(); err != nil {
		return exit(exitUsage, errors.New(strings.TrimPrefix(strings.TrimPrefix(err.Error(), "invalid: "), "bench: ")))
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return usageErr("--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return exit(exitFailure, fmt.Errorf("--cpuprofile: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return usageErr("--memprofile: %v", err)
		}
		defer f.Close()
		defer func() {
			if werr := pprof.Lookup("allocs").WriteTo(f, 0); werr != nil {
				fmt.Fprintf(stderr, "--memprofile: %v\n", werr)
			}
		}()
	}
	fmt.Fprint(stderr, plan(cfg))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Deferred calls run in reverse: the watcher has left before stop
	// cancels ctx and before stderr is handed back.
	defer watchInterrupt(ctx, stop, stderr)()
	rep, err := bench.Run(ctx, cfg)
	if rep != nil {
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if werr := enc.Encode(rep); werr != nil {
				return exit(exitFailure, werr)
			}
		} else if werr := rep.WriteText(stdout); werr != nil {
			return exit(exitFailure, werr)
		}
	}
	if err != nil {
		return exit(exitFailure, err)
	}
	return nil
}

// watchInterrupt tells the user, when the first SIGINT or SIGTERM cancels
// ctx, that the run is cleaning up, and restores the default action (stop),
// so a second signal exits at once. The function it returns ends the
// watcher and waits for it: when the run ends by itself, the watcher
// leaves without a word.
func watchInterrupt(ctx context.Context, stop context.CancelFunc, stderr io.Writer) (end func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		select {
		case <-done:
			return
		default:
		}
		stop()
		fmt.Fprintln(stderr, "orisun bench: interrupted: cleaning up (the bench's database or temporary directory); signal again to exit at once, leaving them behind")
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// plan says, before anything is created, what the run will do and roughly
// what it costs (docs/performance.md: a SQLite backlog of 300,000 events of
// 1 KB took 373 MiB on disk with 8 KB pages, 1,377 MiB with 4 KB pages, whose
// rows spilled into overflow pages; the process peaked near 1 GB of memory).
func plan(cfg bench.Config) string {
	where := "SQLite in a temporary directory (removed after)"
	if cfg.Dir != "" {
		where = "SQLite in " + cfg.Dir
	}
	if cfg.Backend == "postgres" {
		where = "PostgreSQL: a database orisun_bench_<random> created on " + redactURL(cfg.PGURL) + " and dropped after"
	}
	workloads := bench.Workloads
	if len(cfg.Only) > 0 {
		workloads = cfg.Only
	}
	var b strings.Builder
	fmt.Fprintf(&b, "orisun bench: %s; workloads %s; a backlog of %d events of %d bytes", where, strings.Join(workloads, ","), cfg.Events, cfg.EventBytes)
	if cfg.Backend == "sqlite" {
		// GB per million events of 1 KB: 1.5 while a row fits in its 8 KB
		// page (about 2,000 bytes; the backlog alone measured 373 MiB per
		// 300,000 events, about 1.3 GB per million, and the raw insert and
		// append rows add to it), 4.8 once rows spill into overflow pages,
		// as every row did with 4 KB pages.
		perMillion := 1.5
		if cfg.EventBytes > 1800 {
			perMillion = 4.8
		}
		gb := perMillion * float64(cfg.Events) / 1e6 * float64(max(cfg.EventBytes, 1024)) / 1024
		fmt.Fprintf(&b, ", about %.1f GB of disk", gb)
	}
	b.WriteString("; peak memory about 1 GB at the defaults; Ctrl-C stops it and cleans up\n")
	return b.String()
}

// redactURL drops the password of a URL for printing.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "the --pg-url server"
	}
	return u.Redacted()
}

// intList is a comma-separated list of positive integers as a flag.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// Type names the flag's value in help.
func (l *intList) Type() string { return "list" }

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive whole number (give a comma-separated list such as 1000,5000)", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// printSaved prints a JSON report of an earlier run as text.
func printSaved(path string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usageErr("--report: %v", err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return usageErr("--report %s: not a report of orisun bench --json: %v", path, err)
	}
	if err := rep.WriteText(stdout); err != nil {
		return exit(exitFailure, err)
	}
	return nil
}
