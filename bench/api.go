package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/client"
	"github.com/orisun-io/orisun/event"
)

// The api workload: appends through the NATS API with the Go client, as
// an application makes them, from a process of its own (ClientMain) over
// loopback TCP, with no credentials (the application principal). The
// bench's process is then the node's alone, and its CPU and memory
// columns are the node's.

// ClientArg is the argument after "bench" that makes the orisun binary
// the api workload's client process (ClientMain). It is the bench's own
// plumbing, not a command for people.
const ClientArg = "api-client"

// apiBatch and apiBatchCallers are the api workload's batch row: 100
// events per Append from 8 callers.
const (
	apiBatch        = 100
	apiBatchCallers = 8
	// apiRawCallers is raw_request's concurrency: the single-event row
	// that issue 22's target names.
	apiRawCallers = 64
)

// clientHello is the first line the bench sends its client process.
type clientHello struct {
	URL        string `json:"url"`
	EventBytes int    `json:"event_bytes"`
	// CPUProfile, when set, is where the process writes a CPU profile of
	// its whole life.
	CPUProfile string `json:"cpu_profile,omitempty"`
}

// clientTask is one row for the client process: callers each append
// batch events per call to boundary until duration has passed; or, with a
// rate, the paced row of the latency workload (one event per call at that
// rate, a live subscriber).
type clientTask struct {
	Boundary string `json:"boundary"`
	// Boundaries, when set, spreads the callers: caller i appends to
	// Boundaries[i mod len(Boundaries)] instead of Boundary.
	Boundaries []string `json:"boundaries,omitempty"`
	// Request, when set, makes the task the raw_request limit: each call
	// a NATS request to this subject, of the bytes an append of Batch
	// events sends, answered at once by a responder in the bench's
	// process.
	Request  string        `json:"request,omitempty"`
	Callers  int           `json:"callers,omitempty"`
	Batch    int           `json:"batch,omitempty"`
	Rate     int           `json:"rate,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// clientResult is the client process's answer to a task.
type clientResult struct {
	// Events appended (acknowledged), over Seconds of calls;
	// PerBoundary the same by boundary, in the order of the task's
	// Boundaries (spread tasks only).
	Events      int64   `json:"events"`
	PerBoundary []int64 `json:"per_boundary,omitempty"`
	Calls       int64   `json:"calls"`
	Seconds     float64 `json:"seconds"`
	// The client process's CPU over the task and its largest sampled RSS.
	CPUSeconds float64 `json:"cpu_s"`
	RSSMB      float64 `json:"rss_mb"`
	// Latencies of the Append calls, in milliseconds.
	CallP50Ms  float64 `json:"call_p50_ms"`
	CallP99Ms  float64 `json:"call_p99_ms"`
	CallP999Ms float64 `json:"call_p999_ms"`
	// Received and Row are a paced task's: the events its subscriber
	// received, and the row's latencies and rate (pacedResult.fill).
	Received int64 `json:"received,omitempty"`
	Row      *Row  `json:"row,omitempty"`
	// Err is the first failed call, if any; the task then stopped.
	Err string `json:"err,omitempty"`
}

// fillRate sets the row's time and rate to the client's: its events over
// its calls' wall time, not the span of the meter in the node's process.
func (res clientResult) fillRate(row *Row, eventBytes int) {
	row.Seconds = res.Seconds
	if res.Seconds > 0 {
		row.EventsPerSec = float64(res.Events) / res.Seconds
		row.MBPerSec = row.EventsPerSec * float64(eventBytes) / 1e6
	}
}

// clientAPI is the Go client as the paced rows' eventAPI.
type clientAPI struct{ *client.Client }

func (c clientAPI) Head(ctx context.Context, boundary string) (uint64, error) {
	l, err := c.ReadLatest(ctx, boundary, nil)
	return l.Head, err
}

// runClientPaced runs a paced task in the client process.
func runClientPaced(c *client.Client, task clientTask, data []byte) clientResult {
	m := startProcessMeter()
	defer m.finish()
	res, err := paced(context.Background(), clientAPI{c}, data, []string{task.Boundary}, task.Rate, task.Duration)
	if err != nil {
		return clientResult{Err: err.Error()}
	}
	row := m.row("", "", res.appended, len(data))
	out := Row{TargetRate: task.Rate}
	res.fill(&out)
	return clientResult{Events: res.appended, Calls: int64(len(res.calls)), Seconds: res.sending.Seconds(), CPUSeconds: row.CPUSeconds,
		RSSMB: row.RSSMB, Received: res.received, Row: &out}
}

// ClientMain is the api workload's client process: it reads a hello and
// then tasks, one JSON value each, from stdin, and writes a result for
// each task to stdout, until stdin ends. The orisun binary runs it as
// `orisun bench api-client`; the bench's tests run their own binary.
func ClientMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "orisun bench %s: unexpected arguments %q: it takes its work on stdin, from orisun bench\n", ClientArg, args)
		return 2
	}
	dec := json.NewDecoder(bufio.NewReader(stdin))
	var hello clientHello
	if err := dec.Decode(&hello); err != nil {
		fmt.Fprintf(stderr, "orisun bench %s: read the hello: %v (this command is run by orisun bench's api workload)\n", ClientArg, err)
		return 2
	}
	if hello.CPUProfile != "" {
		f, err := os.Create(hello.CPUProfile)
		if err != nil {
			fmt.Fprintf(stderr, "orisun bench %s: cpu profile: %v\n", ClientArg, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "orisun bench %s: cpu profile: %v\n", ClientArg, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	// No credentials: the application principal of a node without
	// ORISUN_NATS_USER or ORISUN_NATS_TOKEN.
	c, err := client.Connect(hello.URL, client.Name("orisun-bench-api"))
	if err != nil {
		fmt.Fprintf(stderr, "orisun bench %s: %v\n", ClientArg, err)
		return 1
	}
	defer c.Close()
	data := eventData(hello.EventBytes)
	enc := json.NewEncoder(stdout)
	for {
		var task clientTask
		err := dec.Decode(&task)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(stderr, "orisun bench %s: read a task: %v\n", ClientArg, err)
			return 2
		}
		run := runClientTask
		if task.Rate > 0 {
			run = runClientPaced
		}
		if err := enc.Encode(run(c, task, data)); err != nil {
			fmt.Fprintf(stderr, "orisun bench %s: %v\n", ClientArg, err)
			return 1
		}
	}
}

// runClientTask runs one append row in the client process.
func runClientTask(c *client.Client, task clientTask, data []byte) clientResult {
	ctx := context.Background()
	var (
		calls    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr string
	)
	lat := make([][]time.Duration, task.Callers)
	tags := []string{"bench"}
	var body []byte
	if task.Request != "" {
		in := make([]event.Input, task.Batch)
		for j := range in {
			in[j] = event.Input{ID: event.NewID(), Type: "bench.event", Data: data, Tags: tags}
		}
		var err error
		if body, err = json.Marshal(api.AppendRequest{Events: in}); err != nil {
			return clientResult{Err: err.Error()}
		}
	}
	// Events appended, by boundary (one, or task.Boundaries).
	per := make([]atomic.Int64, max(1, len(task.Boundaries)))
	m := startProcessMeter()
	defer m.finish()
	deadline := time.Now().Add(task.Duration)
	for i := range task.Callers {
		boundary, at := task.Boundary, 0
		if len(task.Boundaries) > 0 {
			at = i % len(task.Boundaries)
			boundary = task.Boundaries[at]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each call is timed from send to answer; the events of an
			// append get fresh ids before it, outside the time.
			fill, send := func() {}, func() error {
				_, err := c.Conn().Request(task.Request, body, 10*time.Second)
				return err
			}
			if task.Request == "" {
				in := make([]event.Input, task.Batch)
				fill = func() {
					for j := range in {
						in[j] = event.Input{ID: event.NewID(), Type: "bench.event", Data: data, Tags: tags}
					}
				}
				send = func() error {
					_, err := c.Append(ctx, boundary, in, nil)
					return err
				}
			}
			for time.Now().Before(deadline) {
				fill()
				t0 := time.Now()
				err := send()
				lat[i] = append(lat[i], time.Since(t0))
				calls.Add(1)
				if err != nil {
					errOnce.Do(func() { firstErr = err.Error() })
					return
				}
				per[at].Add(int64(task.Batch))
			}
		}()
	}
	wg.Wait()
	var events int64
	var perBoundary []int64
	for i := range per {
		events += per[i].Load()
		if len(task.Boundaries) > 0 {
			perBoundary = append(perBoundary, per[i].Load())
		}
	}
	row := m.row("", "", events, len(data))
	all := slices.Concat(lat...)
	slices.Sort(all)
	return clientResult{Events: events, PerBoundary: perBoundary, Calls: calls.Load(), Seconds: row.Seconds, CPUSeconds: row.CPUSeconds, RSSMB: row.RSSMB,
		CallP50Ms: percentile(all, 0.50), CallP99Ms: percentile(all, 0.99), CallP999Ms: percentile(all, 0.999), Err: firstErr}
}

// clientProc is the running client process, seen from the bench.
type clientProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	enc    *json.Encoder
	dec    *json.Decoder
	stderr *tailBuffer
}

// startClient starts the client process and sends it the hello.
func (r *runner) startClient(ctx context.Context) (*clientProc, error) {
	argv := r.cfg.ClientCommand
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: api: the client process is this executable: %w", err)
		}
		argv = []string{exe, "bench", ClientArg}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 10 * time.Second
	p := &clientProc{cmd: cmd, stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: api: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: api: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: api: start the client process %q: %w", argv, err)
	}
	p.stdin, p.enc, p.dec = stdin, json.NewEncoder(stdin), json.NewDecoder(stdout)
	hello := clientHello{URL: r.node.NATSURL(), EventBytes: r.cfg.EventBytes, CPUProfile: r.cfg.ClientCPUProfile}
	if err := p.enc.Encode(hello); err != nil {
		_ = p.close()
		return nil, fmt.Errorf("bench: api: the client process: %w", err)
	}
	return p, nil
}

// do runs one task in the client process.
func (p *clientProc) do(task clientTask) (clientResult, error) {
	var res clientResult
	if err := p.enc.Encode(task); err != nil {
		return res, fmt.Errorf("bench: api: send a task to the client process: %w (its stderr: %s)", err, p.stderr)
	}
	if err := p.dec.Decode(&res); err != nil {
		return res, fmt.Errorf("bench: api: the client process's result: %w (its stderr: %s)", err, p.stderr)
	}
	if res.Err != "" {
		return res, fmt.Errorf("bench: api: a call failed in the client process: %s", res.Err)
	}
	return res, nil
}

// close ends the client process (stdin's end is its signal) and waits for
// it.
func (p *clientProc) close() error {
	_ = p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("bench: api: the client process: %w (its stderr: %s)", err, p.stderr)
	}
	return nil
}

// rowProfile starts the CPU profile of api row n when the config asks for
// one (RowCPUProfiles); the function it returns stops it.
func (r *runner) rowProfile(n int) (stop func() error, err error) {
	if r.cfg.RowCPUProfiles == "" {
		return func() error { return nil }, nil
	}
	path := filepath.Join(r.cfg.RowCPUProfiles, fmt.Sprintf("api-%d.prof", n))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: the CPU profile of api row %d: %w", n, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("bench: the CPU profile of api row %d: %w", n, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench: the CPU profile of api row %d: %w", n, err)
		}
		return nil
	}, nil
}

// api runs the api rows: single events from each caller count, the most
// of them spread over APIBoundaries boundaries (spreadShape), then
// batches of 100 from 8 callers, each on fresh boundaries for the append
// duration, in one client process.
func (r *runner) api(ctx context.Context) (err error) {
	p, err := r.startClient(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := r.rawRequest(ctx, p, rawRequestName, apiRawCallers, 1); err != nil {
		return err
	}
	if err := r.rawRequest(ctx, p, rawRequestBatchName, apiBatchCallers, apiBatch); err != nil {
		return err
	}
	shapes := appendShapes(r.cfg.Callers,
		appendShape{name: fmt.Sprintf("batches of %d, %d callers", apiBatch, apiBatchCallers), callers: apiBatchCallers, batch: apiBatch})
	if spread, ok := spreadShape(r.cfg); ok {
		// Beside the single-event rows, before the batches.
		shapes = slices.Insert(shapes, len(shapes)-1, spread)
	}
	noted := map[string]bool{}
	for i, s := range shapes {
		boundaries := apiBoundaries(i, s)
		for _, b := range boundaries {
			if _, err := r.node.CreateBoundary(ctx, b); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
		task := clientTask{Boundary: boundaries[0], Callers: s.callers, Batch: s.batch, Duration: r.cfg.AppendDuration}
		if len(boundaries) > 1 {
			task.Boundaries = boundaries
		}
		r.progress("api: %s through the Go client in another process, for %s", s.name, r.cfg.AppendDuration)
		cp := r.pgCheckpoints(ctx)
		m := startMeter()
		defer m.finish()
		stopProfile, err := r.rowProfile(i + 1)
		if err != nil {
			return err
		}
		res, err := p.do(task)
		if perr := stopProfile(); err == nil {
			err = perr
		}
		if err != nil {
			return err
		}
		row := m.row("api", s.name, res.Events, r.cfg.EventBytes)
		r.noteCheckpoints(ctx, &row, cp)
		row.StreamBytes = streamBytes(ctx, r.js)
		res.fillRate(&row, r.cfg.EventBytes)
		row.AppendP50Ms, row.AppendP99Ms = res.CallP50Ms, res.CallP99Ms
		row.ClientCPUSeconds, row.ClientRSSMB = res.CPUSeconds, res.RSSMB
		row.Note = fmt.Sprintf("%d calls, p99.9 %.2f ms per call; cpu s, cores and RSS are the node's process, the client's are beside them",
			res.Calls, res.CallP999Ms)
		if len(boundaries) > 1 {
			row.Note += fmt.Sprintf("; caller i appends to boundary i mod %d (%s to %s)", len(boundaries), boundaries[0], boundaries[len(boundaries)-1])
		}
		row.against(r.rep.Limit("raw_insert"))
		request := rawRequestName
		if s.batch > 1 {
			request = rawRequestBatchName
		}
		row.also(r.rep.Limit(request))
		var how string
		if row.CPUCeilingPerSec, how = r.cpuCeiling(request); how != "" && !noted[request] {
			noted[request] = true
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("api, %d event(s) per call: what the machine's CPU allows, estimated: %s", s.batch, how))
		}
		r.rep.Rows = append(r.rep.Rows, row)
		at := len(r.rep.Rows) - 1
		appended := []int64{res.Events}
		if len(boundaries) > 1 {
			appended = res.PerBoundary
		}
		if len(appended) != len(boundaries) {
			return fmt.Errorf("bench: api %s: the client process counted the events of %d boundaries, want %d", s.name, len(appended), len(boundaries))
		}
		what := "api " + s.name
		for j, b := range boundaries {
			if _, err := r.waitPublished(ctx, b, uint64(appended[j]), 10*time.Minute); err != nil {
				return err
			}
			if len(boundaries) > 1 {
				what = fmt.Sprintf("api %s (%s)", s.name, b)
			}
			if err := r.checkPublished(ctx, b, appended[j], what); err != nil {
				return err
			}
		}
		r.rep.Rows[at].FastBatchEvents = r.fastBatchSum(ctx, boundaries)
	}
	if !r.cfg.wants("latency") {
		return nil
	}
	for _, rate := range r.cfg.Rates {
		if err := r.apiLatency(ctx, p, rate); err != nil {
			return err
		}
	}
	return nil
}

// spreadShape is the api workload's row of spread callers: the most
// callers of cfg.Callers, one event per call, over cfg.APIBoundaries
// boundaries (no more than one per caller); false where that is one
// boundary. What a group costs whatever its size shows here: each
// boundary's groups hold about a boundaries-th of the events.
func spreadShape(cfg Config) (appendShape, bool) {
	callers := slices.Max(cfg.Callers)
	n := min(cfg.APIBoundaries, callers)
	if n < 2 {
		return appendShape{}, false
	}
	return appendShape{name: fmt.Sprintf("1 event per call, %d callers over %d boundaries", callers, n), callers: callers, batch: 1, boundaries: n}, true
}

// fastBatchSum is fastBatchEvents summed over boundaries; nil where one
// of them cannot be read.
func (r *runner) fastBatchSum(ctx context.Context, boundaries []string) *uint64 {
	var sum uint64
	for _, b := range boundaries {
		n := r.fastBatchEvents(ctx, b)
		if n == nil {
			return nil
		}
		sum += *n
	}
	return &sum
}

// apiBoundaries are the boundaries of the api workload's row i:
// bench_api_<i>, or bench_api_<i>_<j> for each of a spread row's.
func apiBoundaries(i int, s appendShape) []string {
	if s.boundaries < 2 {
		return []string{fmt.Sprintf("bench_api_%d", i)}
	}
	names := make([]string, s.boundaries)
	for j := range names {
		names[j] = fmt.Sprintf("bench_api_%d_%d", i, j)
	}
	return names
}

// rawRequestName and rawRequestBatchName are the limits of the NATS
// request and reply alone, with the bytes of a single-event append from
// apiRawCallers callers and of a batch from apiBatchCallers.
const (
	rawRequestName      = "raw_request"
	rawRequestBatchName = "raw_request_batch"
)

// rawRequestReply is the responder's answer: the size of an append's
// reply.
var rawRequestReply = []byte(`{"epoch":"0193a5f0-7c1e-7b3a-9f2d-4c5e6f708192","first":1234567,"last":1234567,"boundary":"bench_api_0","x":"........"}`)

// rawRequest measures a raw_request limit in the api rows' client
// process: callers each sending the bytes of an append of batch events as
// a NATS request to the node's server, answered at once with a reply of
// an append reply's size by one subscription in the bench's process. It
// is what the NATS API costs with no store and no relay behind it.
func (r *runner) rawRequest(ctx context.Context, p *clientProc, name string, callers, batch int) error {
	nc, err := r.node.ConnectNATS("orisun-bench-raw-request")
	if err != nil {
		return fmt.Errorf("bench: raw request: %w", err)
	}
	defer nc.Close()
	// Under _INBOX, where the application principal may publish (its
	// replies); only orisun's own connections, the bench's among them,
	// subscribe there beyond the client's own inboxes.
	const subject = "_INBOX.orisun_bench_raw_request"
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(rawRequestReply) })
	if err != nil {
		return fmt.Errorf("bench: raw request: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("bench: raw request: %w", err)
	}
	r.progress("api: raw request and reply of %d events, %d callers, for %s", batch, callers, r.cfg.AppendDuration)
	m := startMeter()
	defer m.finish()
	res, err := p.do(clientTask{Request: subject, Callers: callers, Batch: batch, Duration: r.cfg.AppendDuration})
	if err != nil {
		return err
	}
	row := m.row("limit", name, res.Events, r.cfg.EventBytes)
	row.StreamBytes = streamBytes(ctx, r.js)
	res.fillRate(&row, r.cfg.EventBytes)
	row.ClientCPUSeconds, row.ClientRSSMB = res.CPUSeconds, res.RSSMB
	row.Note = fmt.Sprintf("%d callers in the api rows' client process, each sending the bytes of an append of %d events (%d calls) as a NATS request "+
		"to the node's server, answered at once by one subscription in the bench's process: the NATS API's own cost, no store, no relay; "+
		"p50 %.2f ms, p99 %.2f ms per call", callers, batch, res.Calls, res.CallP50Ms, res.CallP99Ms)
	r.rep.Limits = append(r.rep.Limits, row)
	return nil
}

// cpuCeiling estimates the most events a second the machine's CPUs
// could run on the api path, were each event to cost no more machine CPU
// than the cheapest form of each part it is made of measured in this run:
// the request and reply (request: the raw_request limit of the row's
// shape), the insert (raw_insert, or the backlog's store appends when
// cheaper) and the relay (raw_relay, or orisun's relay row when cheaper).
// An estimate, not a bound: a part may be done cheaper than anything
// measured here, and each row's machine CPU holds whatever else ran
// meanwhile (docs/performance.md, "What the machine's CPU allows the api
// rows"). 0 without a measure of each part (the relay's come with the
// relay workload) or where /proc/stat could not be read.
func (r *runner) cpuCeiling(request string) (float64, string) {
	parts := [][]*Row{
		{r.rep.Limit(request)},
		{r.rep.Limit("raw_insert"), r.rep.row("backlog")},
		{r.rep.Limit("raw_relay"), r.rep.row("relay")},
	}
	var sum float64
	var used []string
	for _, candidates := range parts {
		var best *Row
		for _, c := range candidates {
			if c != nil && c.MachineCPUUsPerEvent > 0 && (best == nil || c.MachineCPUUsPerEvent < best.MachineCPUUsPerEvent) {
				best = c
			}
		}
		if best == nil {
			return 0, ""
		}
		sum += best.MachineCPUUsPerEvent
		name := best.Name
		if best.Workload != "limit" {
			name = best.Workload + " row (" + best.Name + ")"
		}
		used = append(used, fmt.Sprintf("%s: %.1f", name, best.MachineCPUUsPerEvent))
	}
	most := float64(r.rep.CPUs) * 1e6 / sum
	how := fmt.Sprintf("%s = %.1f µs of machine CPU per event (the cheapest measured form of each part), so %d CPUs would run at most about %.0f events/s",
		strings.Join(used, " + "), sum, r.rep.CPUs, most)
	if l := r.rep.Limit("raw_insert"); l != nil && l.EventsPerSec > 0 {
		how += fmt.Sprintf(" (%.2f of raw_insert)", most/l.EventsPerSec)
	}
	return most, how
}

// apiLatency is the latency row at rate through the API: the client
// process appends one event per call at the rate and subscribes with the
// Go client's Subscribe, on a fresh boundary.
func (r *runner) apiLatency(ctx context.Context, p *clientProc, rate int) error {
	boundary := fmt.Sprintf("bench_api_latency_%d", rate)
	if _, err := r.node.CreateBoundary(ctx, boundary); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.progress("api: %d events/s to a live subscriber through the Go client in another process, for %s", rate, r.cfg.LatencyDuration)
	cp := r.beforePaced(ctx)
	m := startMeter()
	defer m.finish()
	res, err := p.do(clientTask{Boundary: boundary, Rate: rate, Duration: r.cfg.LatencyDuration})
	if err != nil {
		return err
	}
	row := m.row("api", fmt.Sprintf("append → live subscriber, %d events/s", rate), res.Events, r.cfg.EventBytes)
	r.noteCheckpoints(ctx, &row, cp)
	row.StreamBytes = streamBytes(ctx, r.js)
	if res.Row != nil {
		c := res.Row
		row.TargetRate, row.TargetNotReached, row.Note = c.TargetRate, c.TargetNotReached, c.Note
		row.EventsPerSec, row.MBPerSec = c.EventsPerSec, 0
		row.P50Ms, row.P99Ms, row.P999Ms, row.AppendP50Ms, row.AppendP99Ms = c.P50Ms, c.P99Ms, c.P999Ms, c.AppendP50Ms, c.AppendP99Ms
	}
	row.ClientCPUSeconds, row.ClientRSSMB = res.CPUSeconds, res.RSSMB
	compareE2E(&row, r.rep.Limit(rawE2EName(rate)))
	r.rep.Rows = append(r.rep.Rows, row)
	at := len(r.rep.Rows) - 1
	r.rep.check(fmt.Sprintf("api latency %d/s: events received = events appended", rate), res.Events, res.Received)
	if _, err := r.waitPublished(ctx, boundary, uint64(res.Events), 10*time.Minute); err != nil {
		return err
	}
	r.rep.Rows[at].FastBatchEvents = r.fastBatchEvents(ctx, boundary)
	return r.checkPublished(ctx, boundary, res.Events, fmt.Sprintf("api latency %d/s", rate))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return "(empty)"
	}
	return string(bytes.TrimSpace(t.b))
}
