package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the result of one run. Its JSON shape is what `orisun bench
// --json` prints.
type Report struct {
	Backend string    `json:"backend"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	CPUs    int       `json:"cpus"`
	// GOMAXPROCS is the node's process's (the bench's): the CPUs its Go
	// code may use at once, which GOMAXPROCS in the environment or a
	// container's CPU limit can set below CPUs. The api workload's client
	// process inherits the environment.
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	// Version is the orisun measured, as `orisun version` prints it
	// (Config.Version; empty: not recorded). A build without the Go
	// toolchain's vcs stamp (go run, GOFLAGS=-buildvcs=false) says only
	// "(devel)"; "+dirty" means the checkout had uncommitted or untracked
	// files, which the version does not identify.
	Version string `json:"version,omitempty"`
	// GOGC is the environment's GOGC at the start, "" when unset; nil in
	// the reports of runs made before it was recorded. Set, it turns the
	// node's collector tuning off (docs/performance.md, "How much memory a
	// node needs") and reaches the api workload's client process and the
	// limit rows too.
	GOGC *string `json:"gogc"`
	// LoadStart and LoadEnd are the 1, 5 and 15 minute load averages at
	// the start and the end of the run (Linux; empty elsewhere).
	LoadStart []float64 `json:"load_start,omitempty"`
	LoadEnd   []float64 `json:"load_end,omitempty"`
	Settings  Settings  `json:"settings"`
	// Limits are the reference measurements, by name (raw_insert,
	// raw_read, raw_publish).
	Limits []Row `json:"limits"`
	// Rows are orisun's figures, each with its ratio to its limit where
	// it has one.
	Rows []Row `json:"rows"`
	// Checks are the consistency checks of the run (events out = events
	// in); a run with a failed check returns an error too.
	Checks []Check `json:"checks"`
	// Notes say what the run did not measure and why (the outbox
	// workload on SQLite).
	Notes []string `json:"notes,omitempty"`
}

// Settings echo what the run was asked to do.
type Settings struct {
	Events          int           `json:"events"`
	EventBytes      int           `json:"event_bytes"`
	AppendDuration  time.Duration `json:"append_duration_ns"`
	LatencyDuration time.Duration `json:"latency_duration_ns"`
	Rates           []int         `json:"rates"`
	OutboxRates     []int         `json:"outbox_rates,omitempty"`
	Callers         []int         `json:"callers"`
	APIBoundaries   int           `json:"api_boundaries"`
	Workloads       []string      `json:"workloads"`
	ScaleBoundaries int           `json:"scale_boundaries"`
	ScaleBusy       int           `json:"scale_busy"`
	ScaleRate       int           `json:"scale_rate"`
	PublishWindow   int           `json:"publish_window"`
	PublishBatch    int           `json:"publish_batch"`
	StreamMaxBytes  int64         `json:"stream_max_bytes"`
	// MsgID is whether messages carry Nats-Msg-Id (the node's
	// ORISUN_NATS_MSG_ID; the raw loops follow it).
	MsgID bool `json:"msg_id"`
}

// Row is one measured figure.
type Row struct {
	// Workload is append, api, relay, catchup, latency, scale, outbox or
	// limit.
	Workload string  `json:"workload"`
	Name     string  `json:"name"`
	Events   int64   `json:"events"`
	Seconds  float64 `json:"seconds"`
	// EventsPerSec and MBPerSec are throughput (MB = 10^6 bytes of event
	// data, the 1 KB payloads).
	EventsPerSec float64 `json:"events_per_s"`
	MBPerSec     float64 `json:"mb_per_s,omitempty"`
	// Latencies in milliseconds (latency workloads).
	P50Ms  float64 `json:"p50_ms,omitempty"`
	P99Ms  float64 `json:"p99_ms,omitempty"`
	P999Ms float64 `json:"p999_ms,omitempty"`
	// AppendP50Ms and AppendP99Ms are the latencies of the Append calls
	// alone (latency workloads): the part of the end-to-end figure that
	// is the commit.
	AppendP50Ms float64 `json:"append_p50_ms,omitempty"`
	AppendP99Ms float64 `json:"append_p99_ms,omitempty"`
	// AfterP50Ms and AfterP99Ms are the latencies from each Append
	// call's return to the event's delivery (latency workloads): for the
	// outbox rows, from the application's commit to the live subscriber
	// (0 for an event delivered before its call returned).
	AfterP50Ms float64 `json:"after_p50_ms,omitempty"`
	AfterP99Ms float64 `json:"after_p99_ms,omitempty"`
	// TargetRate is the rate asked for (latency workloads).
	TargetRate int `json:"target_rate,omitempty"`
	// TargetNotReached marks a paced row whose rate reached is below 90%
	// of TargetRate: its latencies are mostly the queue of scheduled
	// appends ("target not reached" in the text report).
	TargetNotReached bool `json:"target_not_reached,omitempty"`
	// CPUSeconds is user+system CPU of this process over the workload;
	// CPUPerSec the same per wall second (cores busy).
	CPUSeconds float64 `json:"cpu_s"`
	CPUPerSec  float64 `json:"cpu_per_s"`
	// GCCPUSeconds is the part of CPUSeconds the Go garbage collector
	// took, as the runtime estimates it (/cpu/classes/gc/total:cpu-seconds,
	// the time its workers and pauses held a processor), and GCCycles how
	// many collections ran: the count depends on what was allocated and
	// on the collector's goal, not on what else runs on the machine.
	GCCPUSeconds float64 `json:"gc_cpu_s"`
	GCCycles     int64   `json:"gc_cycles"`
	// AllocMB is what this process allocated in the Go heap over the
	// workload (/gc/heap/allocs:bytes): the garbage the collector's work
	// follows, which, unlike its CPU, the machine's load does not move.
	AllocMB float64 `json:"alloc_mb"`
	// RSSMB is the largest resident set sampled during the workload,
	// MaxRSSMB the process's peak so far (getrusage maxrss). In the api
	// rows the process is the node's alone: the client is another one.
	RSSMB    float64 `json:"rss_mb"`
	MaxRSSMB float64 `json:"max_rss_mb"`
	// HeapLiveMB is the largest live Go heap of the process over the row
	// (what the garbage collector last found reachable; the memory
	// streams' messages are part of it).
	HeapLiveMB float64 `json:"heap_live_mb"`
	// StreamBytes is what the JetStream streams of the row's server hold
	// at the row's end (the account's memory and file storage, as
	// JetStream counts it): RSSMB − StreamBytes/10^6 is the memory the
	// process holds beyond its streams' messages. 0 where the row uses no
	// server (raw_insert, raw_read, the backlog).
	StreamBytes int64 `json:"stream_bytes"`
	// FastBatchEvents is how many of the row's events the node published
	// in fast-ingest batches (full pages of 32 or more, live pages of 100
	// or more; the rest went as single publishes), from its /metrics once
	// the row's events were published; absent where not read (the api and
	// latency rows have it).
	FastBatchEvents *uint64 `json:"fast_batch_events,omitempty"`
	// MachineCPUSeconds is the CPU time every process on the machine used
	// over the row (Linux /proc/stat: user, nice, system, irq, softirq,
	// steal), and MachineCPUUsPerEvent the same per event in
	// microseconds. On a quiet machine that is the row's whole cost, its
	// database, client and node together; on a shared one it holds the
	// others' work too. Absent where /proc/stat cannot be read.
	MachineCPUSeconds    float64 `json:"machine_cpu_s,omitempty"`
	MachineCPUUsPerEvent float64 `json:"machine_cpu_us_per_event,omitempty"`
	// MachineWaitSeconds is the time the threads in /proc (this PID
	// namespace's: the machine's, outside a container) spent runnable but
	// waiting for a CPU over the row, from each thread's
	// /proc/<pid>/task/<tid>/schedstat (threads that ended within the row
	// are not counted), and MachineWaitUsPerEvent the same per event in
	// microseconds. Like MachineCPUSeconds it counts every process's
	// threads, not the row's alone. Beside it, it says whether threads
	// queued for the cores even when the cores were not busy all the
	// time. Absent where schedstat cannot be read.
	MachineWaitSeconds    float64 `json:"machine_wait_s,omitempty"`
	MachineWaitUsPerEvent float64 `json:"machine_wait_us_per_event,omitempty"`
	// CPUCeilingPerSec is, for an api row, an estimate of the most events
	// a second the machine's CPUs could run were each event to cost no
	// more machine CPU than the cheapest measured form of each part it is
	// made of: the request (raw_request or raw_request_batch), the insert
	// (raw_insert or the backlog's store appends) and the relay (raw_relay
	// or the relay row).
	CPUCeilingPerSec float64 `json:"cpu_ceiling_events_per_s,omitempty"`
	// ClientCPUSeconds and ClientRSSMB are the client process's CPU and
	// largest sampled resident set (api rows).
	ClientCPUSeconds float64 `json:"client_cpu_s,omitempty"`
	ClientRSSMB      float64 `json:"client_rss_mb,omitempty"`
	// Limit names the reference this figure is compared with and Ratio is
	// EventsPerSec divided by the limit's events/s.
	Limit       string  `json:"limit,omitempty"`
	LimitPerSec float64 `json:"limit_events_per_s,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
	// Also are the row's ratios to further limits (the relay: raw_publish
	// and raw_read besides raw_relay).
	Also []LimitRatio `json:"also,omitempty"`
	// P99Ratio and P999Ratio compare a latency row with its limit
	// (raw_e2e at the same rate): the row's p99 over the limit's p99, and
	// likewise p99.9. Above 1 is slower than the limit.
	P99Ratio  float64 `json:"p99_ratio,omitempty"`
	P999Ratio float64 `json:"p999_ratio,omitempty"`
	// PGCheckpoints is how many checkpoints PostgreSQL began during the
	// row, and PGCheckpointSyncMs how long the sync phases of those that
	// ended during it took (pg_stat_bgwriter; the paced rows, raw_insert,
	// and the append and api rows, on PostgreSQL): commits wait behind a
	// checkpoint's sync, so a latency row's tail, or a throughput row's
	// rate, may be the server's checkpoint rather than the path measured.
	// PGActivityRead says the three were read (the row is on PostgreSQL
	// and its statistics answered): without it their zeros say nothing.
	PGActivityRead bool `json:"pg_activity_read,omitempty"`
	// PGSettled says the row started right after a VACUUM of the run's
	// database and a CHECKPOINT (paced rows on PostgreSQL), so that it
	// ran between checkpoints.
	PGSettled          bool    `json:"pg_settled,omitempty"`
	PGCheckpoints      int64   `json:"pg_checkpoints,omitempty"`
	PGCheckpointSyncMs float64 `json:"pg_checkpoint_sync_ms,omitempty"`
	// PGAutovacuums is how many autovacuum and autoanalyze runs on the
	// run's database ended during the row (pg_stat_user_tables).
	PGAutovacuums int64 `json:"pg_autovacuums,omitempty"`
	// DrainMs is, for the outbox workload's orisun_enqueue row, how long
	// after the row's last commit every enqueued event was in the log.
	DrainMs float64 `json:"drain_ms,omitempty"`
	Note    string  `json:"note,omitempty"`
}

// LimitRatio is a row's ratio to one more limit.
type LimitRatio struct {
	Limit       string  `json:"limit"`
	LimitPerSec float64 `json:"limit_events_per_s"`
	Ratio       float64 `json:"ratio"`
}

// Check is one consistency check.
type Check struct {
	Name string `json:"name"`
	Want int64  `json:"want"`
	Got  int64  `json:"got"`
	OK   bool   `json:"ok"`
}

// row returns the first row of the workload, or nil.
func (r *Report) row(workload string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Workload == workload {
			return &r.Rows[i]
		}
	}
	return nil
}

func (r *Report) check(name string, want, got int64) {
	r.Checks = append(r.Checks, Check{Name: name, Want: want, Got: got, OK: want == got})
}

// Failed returns the checks that failed.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Limit returns the reference row of that name, or nil.
func (r *Report) Limit(name string) *Row {
	for i := range r.Limits {
		if r.Limits[i].Name == name {
			return &r.Limits[i]
		}
	}
	return nil
}

// WriteText prints the report as a table for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "orisun bench: backend %s, %d CPUs (GOMAXPROCS %d), %s, %s, run took %.1f s\n",
		r.Backend, r.CPUs, r.GOMAXPROCS, r.GoVersion, r.Started.UTC().Format(time.RFC3339), r.Seconds)
	if r.Version != "" || r.GOGC != nil {
		gogc := "not recorded"
		switch {
		case r.GOGC == nil:
		case *r.GOGC == "":
			gogc = "unset (the node tunes its collector)"
		default:
			gogc = *r.GOGC + " (the node's collector tuning off)"
		}
		fmt.Fprintf(&b, "orisun %s; GOGC %s\n", cmp.Or(r.Version, "(version not recorded)"), gogc)
	}
	if len(r.LoadStart) == 3 {
		fmt.Fprintf(&b, "load average at start %.2f %.2f %.2f, at end %.2f %.2f %.2f (a shared machine: compare ratios within this run)\n",
			r.LoadStart[0], r.LoadStart[1], r.LoadStart[2], at(r.LoadEnd, 0), at(r.LoadEnd, 1), at(r.LoadEnd, 2))
	}
	msgID := "on"
	if !r.Settings.MsgID {
		msgID = "off"
	}
	fmt.Fprintf(&b, "backlog %d events of %d bytes; appends %s per row; latency %s per rate; publish batch %d, window %d; stream max bytes %d; Nats-Msg-Id %s\n\n",
		r.Settings.Events, r.Settings.EventBytes, r.Settings.AppendDuration, r.Settings.LatencyDuration,
		r.Settings.PublishBatch, r.Settings.PublishWindow, r.Settings.StreamMaxBytes, msgID)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "workload\tname\tevents\tseconds\tevents/s\tMB/s\tp50 ms\tp99 ms\tp99.9 ms\tcpu s\tgc s\tcores\tmachine µs/ev\twait µs/ev\tRSS MB\tlive heap MB\tstreams MB\tRSS-streams\tlimit\tratio\t\n"
	write := func(title string, rows []Row) {
		fmt.Fprintf(tw, "%s\n", title)
		fmt.Fprint(tw, head)
		for _, x := range rows {
			if x.TargetNotReached {
				x.Name += " (target not reached)"
			}
			streams := float64(x.StreamBytes) / 1e6
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.0f\t%s\t%.0f\t%.0f\t%s\t%s\t\n",
				x.Workload, x.Name, x.Events, x.Seconds, num(x.EventsPerSec, 0), num(x.MBPerSec, 1),
				num(x.P50Ms, 2), num(x.P99Ms, 2), num(x.P999Ms, 2), x.CPUSeconds, x.GCCPUSeconds, x.CPUPerSec, num(x.MachineCPUUsPerEvent, 1), num(x.MachineWaitUsPerEvent, 1), x.RSSMB,
				num(x.HeapLiveMB, 0), streams, x.RSSMB-streams, x.Limit, ratio(x.Ratio))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Limits) > 0 {
		write("reference limits (orisun's code paths removed)", r.Limits)
	}
	write("orisun", r.Rows)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range r.Rows {
		if x.AppendP50Ms > 0 {
			fmt.Fprintf(&b, "%s %s: the Append call alone took p50 %.2f ms, p99 %.2f ms\n", x.Workload, x.Name, x.AppendP50Ms, x.AppendP99Ms)
		}
		if x.Workload == "outbox" && (x.AfterP50Ms > 0 || x.AfterP99Ms > 0) {
			fmt.Fprintf(&b, "%s %s: commit → live subscriber p50 %.2f ms, p99 %.2f ms\n", x.Workload, x.Name, x.AfterP50Ms, x.AfterP99Ms)
		}
		for _, a := range x.Also {
			fmt.Fprintf(&b, "%s %s: also %s of %s (%.0f events/s)\n", x.Workload, x.Name, ratio(a.Ratio), a.Limit, a.LimitPerSec)
		}
		if x.P99Ratio > 0 {
			fmt.Fprintf(&b, "%s %s: p99 %.2f × and p99.9 %.2f × those of %s\n", x.Workload, x.Name, x.P99Ratio, x.P999Ratio, x.Limit)
		}
		if x.ClientCPUSeconds > 0 {
			fmt.Fprintf(&b, "%s %s: the client process used %.2f CPU s, RSS %.0f MB (the row's cpu and RSS are the node's process)\n",
				x.Workload, x.Name, x.ClientCPUSeconds, x.ClientRSSMB)
		}
	}
	notes := false
	for _, n := range r.Notes {
		if !notes {
			b.WriteString("notes:\n")
			notes = true
		}
		fmt.Fprintf(&b, "  %s\n", n)
	}
	for _, x := range append(append([]Row{}, r.Limits...), r.Rows...) {
		if x.Note != "" {
			if !notes {
				b.WriteString("notes:\n")
				notes = true
			}
			fmt.Fprintf(&b, "  %s %s: %s\n", x.Workload, x.Name, x.Note)
		}
	}
	for _, x := range append(append([]Row{}, r.Limits...), r.Rows...) {
		if x.PGCheckpoints > 0 || x.PGCheckpointSyncMs > 0 || x.PGAutovacuums > 0 {
			if !notes {
				b.WriteString("notes:\n")
				notes = true
			}
			fmt.Fprintf(&b, "  %s %s: PostgreSQL began %d checkpoint(s) during the row (the sync phases that ended in it took %.0f ms) "+
				"and ran %d autovacuum or autoanalyze pass(es) on the run's tables: commits wait behind their I/O, so the tail (or the rate) may be the server's\n",
				x.Workload, x.Name, x.PGCheckpoints, x.PGCheckpointSyncMs, x.PGAutovacuums)
		}
	}
	b.WriteString("checks:\n")
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		fmt.Fprintf(&b, "  %-6s %s: want %d, got %d\n", mark, c.Name, c.Want, c.Got)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return math.NaN()
}

func num(v float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func ratio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
