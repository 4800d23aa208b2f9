package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
)

// tiny is a run small enough for the test suite: every workload, a backlog
// of 2,000 events, tiny rates and durations. Nothing here is timed: the
// test checks that the report is produced and that its counts agree.
func tiny(backend, pgURL string) Config {
	return Config{
		Backend:         backend,
		PGURL:           pgURL,
		Events:          2000,
		EventBytes:      1024,
		AppendDuration:  200 * time.Millisecond,
		Callers:         []int{1, 4},
		Rates:           []int{50, 200},
		OutboxRates:     []int{50},
		LatencyDuration: 500 * time.Millisecond,
		ScaleBoundaries: 20,
		ScaleBusy:       2,
		ScaleRate:       20,
		ScaleIdle:       300 * time.Millisecond,
		ClientCommand:   clientCommand(),
	}
}

// TestSmoke runs the whole bench on each backend (PostgreSQL: the server of
// ORISUN_TEST_PG_URL, on which the bench creates and drops its own
// database) and checks the report: events out = events in for every
// workload, every ratio finite and positive, text and JSON both produced.
func TestSmoke(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			var pgURL string
			if backend == "postgres" {
				pgURL = pgtest.ServerURL(t)
			}
			cfg := tiny(backend, pgURL)
			var progress bytes.Buffer
			cfg.Progress = &progress
			rep, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
			}
			checkReport(t, rep, cfg)
			if backend == "postgres" {
				checkDropped(t, pgURL, progress.String())
			}
		})
	}
}

// TestAppendOnlyRunUsesTheStoresPageSize: with --only append no backlog is
// written, and the raw insert is the first to open the directory; the
// database it creates must have the page size the store gives a new
// database, or the append rows measure another database than a node
// would have.
func TestAppendOnlyRunUsesTheStoresPageSize(t *testing.T) {
	cfg := tiny("sqlite", "")
	cfg.Only = []string{"append"}
	cfg.Callers = []int{1}
	cfg.Dir = filepath.Join(t.TempDir(), "data")
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	f, err := os.Open(filepath.Join(cfg.Dir, sqlite.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	header := make([]byte, 100)
	if _, err := io.ReadFull(f, header); err != nil {
		t.Fatal(err)
	}
	// The database header: the page size at offset 16 (big-endian), the
	// file format versions at 18 and 19 (2: WAL).
	if page := int(binary.BigEndian.Uint16(header[16:18])); page != sqlite.PageSize || header[18] != 2 {
		t.Fatalf("the database has %d-byte pages, format %d; want %d-byte pages and WAL (2)", page, header[18], sqlite.PageSize)
	}
}

// wantRowProfiles: dir holds a CPU profile of each append row of the api
// workload in rep, in pprof's format, each taken over at least the row's
// duration (so over the row, not beside it), and nothing else.
func wantRowProfiles(t *testing.T, dir string, rep *Report, rowTime time.Duration) {
	t.Helper()
	n := 0
	for _, row := range rep.Rows {
		if row.Workload != "api" || strings.HasPrefix(row.Name, "append → live") {
			continue
		}
		n++
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("api-%d.prof", n)))
		if err != nil {
			t.Fatalf("api row %d (%s): %v", n, row.Name, err)
		}
		d, err := profileDuration(b)
		if err != nil {
			t.Fatalf("api row %d (%s): %v", n, row.Name, err)
		}
		if d < rowTime {
			t.Errorf("api row %d (%s): the profile lasted %s, less than the row's %s", n, row.Name, d, rowTime)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(entries) != n {
		t.Errorf("%d api append rows, %d files in the profiles' directory", n, len(entries))
	}
}

// profileDuration reads the duration_nanos field (10) of a gzipped pprof
// profile (profile.proto), walking its top-level fields.
func profileDuration(gz []byte) (time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return 0, fmt.Errorf("not a gzipped profile: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return 0, err
	}
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errors.New("a bad field key")
		}
		b = b[n:]
		switch key & 7 {
		case 0: // varint
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return 0, errors.New("a bad varint")
			}
			if key>>3 == 10 {
				return time.Duration(v), nil
			}
			b = b[n:]
		case 1: // 64 bits
			if len(b) < 8 {
				return 0, errors.New("a short fixed64")
			}
			b = b[8:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return 0, errors.New("a bad length")
			}
			b = b[n+int(l):]
		case 5: // 32 bits
			if len(b) < 4 {
				return 0, errors.New("a short fixed32")
			}
			b = b[4:]
		default:
			return 0, fmt.Errorf("wire type %d", key&7)
		}
	}
	return 0, errors.New("no duration_nanos in the profile")
}

// TestAPIWorkload runs the api workload alone on SQLite, in a directory
// kept after the run, and checks it against the store: each row is
// compared with raw_insert (limit and ratio in the JSON), and the events
// it counts are the events the store holds on its boundary, in whole
// batches. The rows' latencies and rates are not asserted (nothing is
// timed).
func TestAPIWorkload(t *testing.T) {
	cfg := tiny("sqlite", "")
	// relay too: its raw_relay is part of the api rows' CPU ceiling.
	cfg.Only = []string{"api", "relay"}
	cfg.Callers = []int{1, 3}
	cfg.Dir = filepath.Join(t.TempDir(), "data")
	cfg.RowCPUProfiles = t.TempDir()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantRowProfiles(t, cfg.RowCPUProfiles, rep, cfg.AppendDuration)
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %q failed: want %d, got %d", c.Name, c.Want, c.Got)
		}
	}
	if rep.Limit("raw_insert") == nil {
		t.Fatal("no raw_insert limit in the report")
	}
	// The NATS request and reply alone, of each shape, and the api rows
	// read against them; where the machine's CPU time can be read, the
	// most the CPUs allow, from the three limits an appended event is
	// made of.
	_, canRead := machineBusy()
	for _, name := range []string{rawRequestName, rawRequestBatchName} {
		l := rep.Limit(name)
		if l == nil || l.Events <= 0 || !finitePositive(l.EventsPerSec) || !(l.ClientCPUSeconds > 0) {
			t.Fatalf("limit %s: %+v", name, l)
		}
		if canRead && !finitePositive(l.MachineCPUUsPerEvent) {
			t.Errorf("limit %s: machine CPU per event %v", name, l.MachineCPUUsPerEvent)
		}
	}
	if l := rep.Limit(rawRequestBatchName); l.Events%apiBatch != 0 {
		t.Errorf("limit %s: %d events, not whole batches of %d", rawRequestBatchName, l.Events, apiBatch)
	}
	for _, row := range rep.Rows {
		if row.Workload != "api" {
			continue
		}
		request := rawRequestName
		if strings.HasPrefix(row.Name, "batches") {
			request = rawRequestBatchName
			// Every page of appends of 100 holds 100 events or more: each
			// goes as one fast-ingest batch (docs/design.md §5).
			if row.FastBatchEvents == nil || int64(*row.FastBatchEvents) != row.Events {
				t.Errorf("api %q: %v of %d events in fast-ingest batches, want all", row.Name, row.FastBatchEvents, row.Events)
			}
		} else if row.FastBatchEvents == nil || int64(*row.FastBatchEvents) > row.Events {
			t.Errorf("api %q: %v of %d events in fast-ingest batches", row.Name, row.FastBatchEvents, row.Events)
		}
		if !slices.ContainsFunc(row.Also, func(a LimitRatio) bool { return a.Limit == request && finitePositive(a.Ratio) }) {
			t.Errorf("api %q: no ratio to %s: %+v", row.Name, request, row.Also)
		}
		if !canRead {
			continue
		}
		if !finitePositive(row.MachineCPUUsPerEvent) {
			t.Errorf("api %q: machine CPU per event %v", row.Name, row.MachineCPUUsPerEvent)
		}
		// The cheapest measured form of each part: the limit, or
		// orisun's own row of it.
		sum := rep.Limit(request).MachineCPUUsPerEvent
		for _, p := range [][2]string{{"raw_insert", "backlog"}, {"raw_relay", "relay"}} {
			least := rep.Limit(p[0]).MachineCPUUsPerEvent
			for _, r := range rep.Rows {
				if r.Workload == p[1] && r.MachineCPUUsPerEvent > 0 {
					least = min(least, r.MachineCPUUsPerEvent)
				}
			}
			sum += least
		}
		if want := float64(rep.CPUs) * 1e6 / sum; !finitePositive(row.CPUCeilingPerSec) || math.Abs(row.CPUCeilingPerSec-want) > want*1e-9 {
			t.Errorf("api %q: CPU ceiling %v events/s, want %v from the parts' machine CPU", row.Name, row.CPUCeilingPerSec, want)
		}
	}
	if canRead && !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "what the machine's CPU allows") }) {
		t.Errorf("no note of what the machine's CPU allows the api rows: %q", rep.Notes)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var api []map[string]any
	for _, row := range back.Rows {
		if row["workload"] == "api" {
			api = append(api, row)
		}
	}
	// One row per caller count, the spread callers (the most of them,
	// over as many boundaries, no more than the default's 8), the batches.
	if len(api) != len(cfg.Callers)+2 {
		t.Fatalf("%d api rows in the JSON, want %d (one per caller count, the spread callers and the batches)", len(api), len(cfg.Callers)+2)
	}
	spread := len(cfg.Callers)
	if want := fmt.Sprintf("1 event per call, %d callers over %d boundaries", slices.Max(cfg.Callers), slices.Max(cfg.Callers)); api[spread]["name"] != want {
		t.Errorf("api row %d is %v, want %q", spread, api[spread]["name"], want)
	}
	s := storetest.SQLite(t, sqlite.Config{Dir: cfg.Dir})
	for i, row := range api {
		ratio, _ := row["ratio"].(float64)
		if row["limit"] != "raw_insert" || !finitePositive(ratio) {
			t.Errorf("api row %v: limit %v, ratio %v; want raw_insert and a finite positive ratio", row["name"], row["limit"], row["ratio"])
		}
		for _, field := range []string{"rss_mb", "client_rss_mb", "stream_bytes"} {
			if v, _ := row[field].(float64); !(v > 0) {
				t.Errorf("api row %v: %s is %v", row["name"], field, row[field])
			}
		}
		events := int64(row["events"].(float64))
		if events <= 0 {
			t.Errorf("api row %v: no event appended", row["name"])
		}
		names := []string{fmt.Sprintf("bench_api_%d", i)}
		if i == spread {
			names = names[:0]
			for j := range slices.Max(cfg.Callers) {
				names = append(names, fmt.Sprintf("bench_api_%d_%d", i, j))
			}
		}
		var held int64
		for _, name := range names {
			bd, err := s.Boundary(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if i == spread && bd.Head == 0 {
				t.Errorf("api row %v: its boundary %s holds nothing", row["name"], name)
			}
			held += int64(bd.Head)
		}
		if held != events {
			t.Errorf("api row %v counts %d events; its boundaries %v hold %d", row["name"], events, names, held)
		}
		if i == len(api)-1 && events%apiBatch != 0 {
			t.Errorf("api row %v: %d events is not whole batches of %d", row["name"], events, apiBatch)
		}
	}
}

// TestAppendOnlyPostgres: a run of the append workload alone on
// PostgreSQL measures raw_insert on the store's own table layout, which
// exists only once the store's migrations ran; the raw insert once ran
// before them and failed ("relation orisun_events does not exist").
func TestAppendOnlyPostgres(t *testing.T) {
	cfg := tiny("postgres", pgtest.ServerURL(t))
	cfg.Only = []string{"append"}
	cfg.Callers = []int{1}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if l := rep.Limit("raw_insert"); l == nil || l.Events <= 0 {
		t.Fatalf("raw_insert: %+v", l)
	}
}

// checkDropped asserts that the database the run created (named in its
// progress) is gone from the server.
func checkDropped(t *testing.T, serverURL, progress string) {
	t.Helper()
	m := regexp.MustCompile(`created database (` + dbPrefix + `[0-9a-f]+)`).FindStringSubmatch(progress)
	if m == nil {
		t.Fatalf("the progress names no database created:\n%s", progress)
	}
	ctx := context.Background()
	var n int
	if err := pgtest.Connect(t, serverURL).QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", m[1]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the bench database %s is still on the server after the run", m[1])
	}
}

// TestTargetNotReached: a paced row below 90% of its target rate is marked
// in the JSON and the text report; one at the target is not.
func TestTargetNotReached(t *testing.T) {
	for _, tc := range []struct {
		appended int64
		marked   bool
	}{{950, false}, {899, true}} {
		res := &pacedResult{appended: tc.appended, received: tc.appended, sending: time.Second,
			lat: []time.Duration{time.Millisecond}, calls: []time.Duration{time.Millisecond}}
		row := Row{Workload: "latency", Name: "1000 events/s", TargetRate: 1000}
		res.fill(&row)
		if row.TargetNotReached != tc.marked {
			t.Errorf("%d events/s of 1000: marked %v, want %v", tc.appended, row.TargetNotReached, tc.marked)
		}
		var text bytes.Buffer
		if err := (&Report{Rows: []Row{row}}).WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(text.String(), "target not reached"); got != tc.marked {
			t.Errorf("%d events/s of 1000: the text says \"target not reached\": %v, want %v\n%s", tc.appended, got, tc.marked, text.String())
		}
		b, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"target_not_reached":true`); got != tc.marked {
			t.Errorf("%d events/s of 1000: JSON %s", tc.appended, b)
		}
	}
}

func checkReport(t *testing.T, rep *Report, cfg Config) {
	t.Helper()
	if rep.GOMAXPROCS != runtime.GOMAXPROCS(0) || rep.CPUs != runtime.NumCPU() {
		t.Errorf("report: gomaxprocs %d, cpus %d; want this process's %d and %d", rep.GOMAXPROCS, rep.CPUs, runtime.GOMAXPROCS(0), runtime.NumCPU())
	}
	if rep.GOGC == nil || *rep.GOGC != os.Getenv("GOGC") {
		t.Errorf("report: gogc %v; the environment has %q", rep.GOGC, os.Getenv("GOGC"))
	}
	// Every consistency check the run made holds, and the essential ones
	// were made.
	want := []string{
		"backlog head = events appended",
		"raw read rows = backlog",
		"raw publish acknowledged = backlog",
		"relay: events published = events appended",
		"relay: stream last sequence = events appended",
		"catch-up: events received = events appended",
		"latency 50/s: events received = events appended",
		"latency 200/s: events received = events appended",
		"scale: events received = events appended",
		"raw relay published = backlog",
		"api latency 50/s: events received = events appended",
		"api latency 200/s: events received = events appended",
		"raw e2e 50/s: events received = events inserted",
		"raw e2e 200/s: events received = events inserted",
	}
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %q failed: want %d, got %d", c.Name, c.Want, c.Got)
		}
	}
	for _, name := range want {
		found := false
		for _, c := range rep.Checks {
			found = found || c.Name == name
		}
		if !found {
			t.Errorf("the report has no check %q", name)
		}
	}
	published := 0
	for _, c := range rep.Checks {
		if (strings.HasPrefix(c.Name, "append ") || strings.HasPrefix(c.Name, "api ")) && strings.HasSuffix(c.Name, "events published = events appended") {
			published++
			if c.Got == 0 {
				t.Errorf("check %q: no event appended", c.Name)
			}
		}
	}
	// The spread callers' row checks each of its boundaries.
	if want := 2*(len(cfg.Callers)+1) + min(slices.Max(cfg.Callers), rep.Settings.APIBoundaries) + len(cfg.Rates); published != want {
		t.Errorf("%d append and api rows checked for events published = appended, want %d", published, want)
	}
	// The limits were measured.
	limits := []string{"raw_insert", "raw_read", "raw_publish", "raw_relay"}
	for _, rate := range cfg.Rates {
		limits = append(limits, rawE2EName(rate))
	}
	for _, name := range limits {
		l := rep.Limit(name)
		if l == nil {
			t.Errorf("no limit %s in the report", name)
			continue
		}
		if !(l.EventsPerSec > 0) || math.IsInf(l.EventsPerSec, 0) || l.Events <= 0 {
			t.Errorf("limit %s: %d events at %v events/s", name, l.Events, l.EventsPerSec)
		}
	}
	if l := rep.Limit("raw_read"); l != nil && l.Events != int64(cfg.Events) {
		t.Errorf("raw read read %d events, the backlog is %d", l.Events, cfg.Events)
	}
	for _, rate := range cfg.Rates {
		l := rep.Limit(rawE2EName(rate))
		if l == nil {
			continue
		}
		if l.TargetRate != rate || l.Events != int64(float64(rate)*cfg.LatencyDuration.Seconds()) ||
			!(l.P50Ms > 0) || l.P50Ms > l.P99Ms || l.P99Ms > l.P999Ms {
			t.Errorf("limit %s: rate %d, %d events, p50 %v p99 %v p99.9 %v", l.Name, l.TargetRate, l.Events, l.P50Ms, l.P99Ms, l.P999Ms)
		}
	}
	if l := rep.Limit("raw_relay"); l != nil && l.Events != int64(cfg.Events) {
		t.Errorf("raw relay published %d events, the backlog is %d", l.Events, cfg.Events)
	}
	// Every row of a workload with a limit has a finite, positive ratio;
	// the relay is compared with raw_relay, and also with raw_publish and
	// raw_read; each latency row with raw_e2e at its rate.
	rows := map[string]int{}
	var cycles int64
	for _, row := range rep.Rows {
		rows[row.Workload]++
		paced := row.Workload == "latency" || row.Workload == "api" && row.TargetRate > 0
		switch {
		case !paced && (row.Workload == "append" || row.Workload == "api" || row.Workload == "relay" || row.Workload == "catchup"):
			if row.Limit == "" || !finitePositive(row.Ratio) {
				t.Errorf("%s %q: limit %q, ratio %v: want a finite positive ratio", row.Workload, row.Name, row.Limit, row.Ratio)
			}
			if (row.Workload == "append" || row.Workload == "api") && row.Limit != "raw_insert" {
				t.Errorf("%s %q: limit %q, want raw_insert", row.Workload, row.Name, row.Limit)
			}
		case paced:
			if row.Events <= 0 || !(row.P50Ms > 0) || row.P50Ms > row.P99Ms || row.P99Ms > row.P999Ms {
				t.Errorf("%s %q: %d events, p50 %v p99 %v p99.9 %v", row.Workload, row.Name, row.Events, row.P50Ms, row.P99Ms, row.P999Ms)
			}
			if row.Limit != rawE2EName(row.TargetRate) || !finitePositive(row.P99Ratio) || !finitePositive(row.P999Ratio) {
				t.Errorf("%s %q: limit %q, p99 ratio %v, p99.9 ratio %v: want raw_e2e at its rate and finite positive ratios",
					row.Workload, row.Name, row.Limit, row.P99Ratio, row.P999Ratio)
			}
		}
		if row.CPUSeconds < 0 || math.IsNaN(row.CPUPerSec) {
			t.Errorf("%s %q: cpu %v s (%v per s)", row.Workload, row.Name, row.CPUSeconds, row.CPUPerSec)
		}
		if row.GCCycles < 0 || row.GCCPUSeconds < 0 || row.GCCPUSeconds > row.CPUSeconds+1 {
			t.Errorf("%s %q: %d collections, %v gc cpu s of %v", row.Workload, row.Name, row.GCCycles, row.GCCPUSeconds, row.CPUSeconds)
		}
		cycles += row.GCCycles
		if row.Events > 0 && !(row.AllocMB > 0) {
			t.Errorf("%s %q: %d events and %v MB allocated", row.Workload, row.Name, row.Events, row.AllocMB)
		}
	}
	// A small row may allocate less than the collector's goal, but the
	// relay of the backlog does not.
	if cycles == 0 {
		t.Error("no collection in any row: the gc columns measure nothing")
	}
	for _, row := range rep.Rows {
		if row.Workload == "relay" {
			if row.Limit != "raw_relay" {
				t.Errorf("relay compared with %s, want raw_relay", row.Limit)
			}
			var also []string
			for _, a := range row.Also {
				also = append(also, a.Limit)
				if !finitePositive(a.Ratio) {
					t.Errorf("relay: ratio %v to %s", a.Ratio, a.Limit)
				}
			}
			if !slices.Equal(also, []string{"raw_publish", "raw_read"}) {
				t.Errorf("relay also compared with %v, want raw_publish and raw_read", also)
			}
			if row.Events != int64(cfg.Events) {
				t.Errorf("relay row: %d events, the backlog is %d", row.Events, cfg.Events)
			}
		}
	}
	// Every row reports the process's memory, and every row that used a
	// NATS server the bytes its streams hold.
	for _, row := range append(append([]Row{}, rep.Limits...), rep.Rows...) {
		if !(row.RSSMB > 0) || !(row.HeapLiveMB > 0) {
			t.Errorf("%s %q: RSS %v MB, live heap %v MB", row.Workload, row.Name, row.RSSMB, row.HeapLiveMB)
		}
		// raw_request and raw_request_batch use the node's server but
		// write no stream: what its streams hold then may be nothing.
		onServer := row.Workload != "backlog" && !slices.Contains([]string{"raw_insert", "raw_read", "app_tx", outboxFloorName, rawRequestName, rawRequestBatchName}, row.Name)
		if onServer && row.StreamBytes <= 0 {
			t.Errorf("%s %q: stream bytes %d, want what its server's streams hold", row.Workload, row.Name, row.StreamBytes)
		}
	}
	wantRows := map[string]int{"backlog": 1, "relay": 1, "catchup": 1, "append": len(cfg.Callers) + 1, "api": len(cfg.Callers) + 2 + len(cfg.Rates),
		"latency": len(cfg.Rates), "scale": 3, "outbox": 0}
	checkOutbox(t, rep, cfg)
	// On PostgreSQL every paced row of the latency comparisons (raw_e2e,
	// latency, api → live, outbox) starts after a VACUUM and a CHECKPOINT
	// (the tests' server lets the bench take one); the scale workload's
	// busy boundaries compare with nothing.
	for _, row := range append(append([]Row{}, rep.Limits...), rep.Rows...) {
		if row.TargetRate > 0 && row.Workload != "scale" && row.PGSettled != (cfg.Backend == "postgres") {
			t.Errorf("%s %q on %s: pg_settled %v", row.Workload, row.Name, cfg.Backend, row.PGSettled)
		}
	}
	// The throughput rows an api or append ratio is made of (raw_insert
	// and the rows read against it) record the server's checkpoints and
	// autovacuum passes too, unsettled: on PostgreSQL they were read, on
	// SQLite there is nothing to read.
	for _, row := range append(append([]Row{}, rep.Limits...), rep.Rows...) {
		if row.TargetRate > 0 || !(row.Name == "raw_insert" || row.Workload == "append" || row.Workload == "api") {
			continue
		}
		if row.PGActivityRead != (cfg.Backend == "postgres") || row.PGSettled {
			t.Errorf("%s %q on %s: pg_activity_read %v, pg_settled %v", row.Workload, row.Name, cfg.Backend, row.PGActivityRead, row.PGSettled)
		}
	}
	if cfg.Backend == "postgres" {
		wantRows["outbox"] = 2 + len(cfg.OutboxRates)
	}
	for w, n := range wantRows {
		if rows[w] != n {
			t.Errorf("%d %s rows, want %d", rows[w], w, n)
		}
	}
	// The text report names every row; the JSON report reads back the same.
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, row := range append(append([]Row{}, rep.Limits...), rep.Rows...) {
		if !strings.Contains(text.String(), row.Name) {
			t.Errorf("text report lacks row %q:\n%s", row.Name, text.String())
		}
	}
	if strings.Contains(text.String(), "FAILED") {
		t.Errorf("text report shows a failed check:\n%s", text.String())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("JSON report does not parse: %v", err)
	}
	if len(back.Rows) != len(rep.Rows) || len(back.Limits) != len(rep.Limits) || len(back.Checks) != len(rep.Checks) {
		t.Errorf("JSON report lost rows: %d/%d rows, %d/%d limits", len(back.Rows), len(rep.Rows), len(back.Limits), len(rep.Limits))
	}
}

// checkOutbox checks the outbox workload's part of a report: on
// PostgreSQL the limit app_tx, the rows of orisun_enqueue and orisun_append
// compared with it, every enqueued or appended event published, the
// enqueue row's drain measured, and a latency row per outbox rate; on
// SQLite a note that it does not apply.
func checkOutbox(t *testing.T, rep *Report, cfg Config) {
	t.Helper()
	if cfg.Backend != "postgres" {
		if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "outbox: not applicable on sqlite") }) {
			t.Errorf("no note that the outbox workload does not apply on SQLite: %q", rep.Notes)
		}
		return
	}
	if l := rep.Limit("app_tx"); l == nil || l.Events <= 0 || !finitePositive(l.EventsPerSec) {
		t.Errorf("limit app_tx: %+v", l)
	}
	// The floor of any staging: the same transactions with a bare event
	// row, compared with app_tx, and the enqueue row compared with it.
	if l := rep.Limit(outboxFloorName); l == nil || l.Events <= 0 || l.Limit != "app_tx" || !finitePositive(l.Ratio) {
		t.Errorf("limit %s: %+v", outboxFloorName, l)
	}
	for _, name := range []string{"outbox orisun_enqueue: events published = events appended", "outbox orisun_append: events published = events appended"} {
		if !slices.ContainsFunc(rep.Checks, func(c Check) bool { return c.Name == name && c.Got > 0 }) {
			t.Errorf("no check %q with events", name)
		}
	}
	for _, rate := range cfg.OutboxRates {
		name := fmt.Sprintf("outbox latency %d/s: events received = events enqueued", rate)
		if !slices.ContainsFunc(rep.Checks, func(c Check) bool { return c.Name == name && c.Got > 0 }) {
			t.Errorf("no check %q with events", name)
		}
	}
	for _, row := range rep.Rows {
		if row.Workload != "outbox" {
			continue
		}
		if row.TargetRate > 0 {
			if row.Events <= 0 || !(row.P50Ms > 0) || row.P50Ms > row.P99Ms {
				t.Errorf("outbox %q: %d events, p50 %v p99 %v", row.Name, row.Events, row.P50Ms, row.P99Ms)
			}
			// Commit → live subscriber: the mover and the relay take
			// some time after every commit.
			if !(row.AfterP99Ms > 0) || row.AfterP50Ms > row.AfterP99Ms || row.AfterP99Ms > row.P99Ms+1 {
				t.Errorf("outbox %q: commit → delivered p50 %v p99 %v (scheduled → delivered p99 %v)", row.Name, row.AfterP50Ms, row.AfterP99Ms, row.P99Ms)
			}
			continue
		}
		if row.Limit != "app_tx" || !finitePositive(row.Ratio) {
			t.Errorf("outbox %q: limit %q, ratio %v; want app_tx and a finite positive ratio", row.Name, row.Limit, row.Ratio)
		}
		if strings.Contains(row.Name, outboxEnqueue) && !(row.DrainMs > 0) {
			t.Errorf("outbox %q: drain %v ms, want the time to the last enqueued event in the log", row.Name, row.DrainMs)
		}
		if !slices.ContainsFunc(row.Also, func(a LimitRatio) bool { return a.Limit == outboxFloorName && finitePositive(a.Ratio) }) {
			t.Errorf("outbox %q: no ratio to %s: %+v", row.Name, outboxFloorName, row.Also)
		}
	}
}

// TestConfigErrors: bad settings are refused with an error naming the
// setting, before anything is created.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		field  string
	}{
		{func(c *Config) { c.Backend = "mysql" }, "backend"},
		{func(c *Config) { c.Backend, c.PGURL = "postgres", "" }, "pg-url"},
		{func(c *Config) { c.Backend, c.PGURL = "postgres", "host=localhost" }, "pg-url"},
		{func(c *Config) { c.Events = 0 }, "events"},
		{func(c *Config) { c.EventBytes = 1 << 30 }, "event-bytes"},
		{func(c *Config) { c.Rates = []int{0} }, "rates"},
		{func(c *Config) { c.OutboxRates = []int{0} }, "outbox-rates"},
		{func(c *Config) { c.Callers = []int{-1} }, "callers"},
		{func(c *Config) { c.AppendDuration = 0 }, "append-duration"},
		{func(c *Config) { c.LatencyDuration = -time.Second }, "duration"},
		{func(c *Config) { c.ScaleBusy = c.ScaleBoundaries + 1 }, "scale-busy"},
		{func(c *Config) { c.StreamMaxBytes = 10 }, "stream-max-bytes"},
		{func(c *Config) { c.Only = []string{"relay", "nope"} }, "only"},
	} {
		cfg := Defaults()
		tc.mutate(&cfg)
		_, err := Run(context.Background(), cfg)
		if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: got %v, want an invalid-input error naming %s", tc.field, err, tc.field)
		}
	}
}

// TestDirMustBeEmpty: the bench never writes into a directory that holds
// anything.
func TestDirMustBeEmpty(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "orisun.db")
	if err := os.WriteFile(keep, []byte("someone's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tiny("sqlite", "")
	cfg.Dir = dir
	_, err := Run(context.Background(), cfg)
	if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Run in a non-empty directory: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "someone's data" {
		t.Fatalf("the file in the directory changed: %q, %v", b, err)
	}
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// TestCheckpointsNoted: a checkpoint PostgreSQL runs during a paced row is
// recorded on the row (pg_stat_bgwriter, read before and after) and said
// in the text report, so that a latency tail made by the server's
// checkpoint is not taken for the path's; a row without one says nothing.
func TestCheckpointsNoted(t *testing.T) {
	url := pgtest.ServerURL(t)
	ctx := context.Background()
	r := &runner{pgURL: url}
	before := r.pgCheckpoints(ctx)
	if !before.ok {
		t.Fatalf("the server's statistics could not be read: %v", before.err)
	}
	if _, err := pgtest.Connect(t, url).Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	// The checkpointer wakes the CHECKPOINT's caller before it reports
	// the checkpoint to the statistics (checkpointer.c), so the count
	// may lag the command's return a moment.
	var with, without Row
	testutil.Eventually(t, "a CHECKPOINT during the row recorded", 10*time.Second, 20*time.Millisecond, func() bool {
		with = Row{Workload: "latency", Name: "1000 events/s"}
		r.noteCheckpoints(ctx, &with, before)
		return with.PGActivityRead && with.PGCheckpoints >= 1
	})
	// On SQLite nothing is read and nothing noted. (Not a second read on
	// the server: the other packages' tests share it, and their DROP
	// DATABASE checkpoints.)
	without.Workload, without.Name = "latency", "5000 events/s"
	(&runner{}).noteCheckpoints(ctx, &without, pgCheckpoints{})
	if without.PGActivityRead || without.PGCheckpoints != 0 || without.PGCheckpointSyncMs != 0 {
		t.Fatalf("a row without PostgreSQL: %+v", without)
	}
	// A server whose statistics do not answer: the report says so once,
	// and the row is not marked read.
	rep := &Report{}
	gone := &runner{pgURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", rep: rep}
	var unread Row
	gone.noteCheckpoints(ctx, &unread, gone.pgCheckpoints(ctx))
	gone.noteCheckpoints(ctx, &unread, gone.pgCheckpoints(ctx))
	if unread.PGActivityRead || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "could not be read") {
		t.Fatalf("statistics that could not be read: row %+v, notes %q; want one note and the row not marked", unread, rep.Notes)
	}
	var b bytes.Buffer
	if err := (&Report{Rows: []Row{with, without}}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "latency 1000 events/s: PostgreSQL began") || strings.Contains(b.String(), "latency 5000 events/s: PostgreSQL") {
		t.Fatalf("the text report does not say which row had a checkpoint:\n%s", b.String())
	}
}

// TestCPUCeiling: the api rows' estimate takes, for each part of an
// append, the cheapest measured form (the limit or orisun's own row), and
// is the machine's CPUs over their sum; without a measure of each part
// there is none.
func TestCPUCeiling(t *testing.T) {
	r := &runner{rep: &Report{CPUs: 2,
		Limits: []Row{
			{Workload: "limit", Name: rawRequestName, MachineCPUUsPerEvent: 10},
			{Workload: "limit", Name: "raw_insert", MachineCPUUsPerEvent: 20, EventsPerSec: 100_000},
			{Workload: "limit", Name: "raw_relay", MachineCPUUsPerEvent: 30},
		},
		Rows: []Row{
			{Workload: "backlog", Name: "store append", MachineCPUUsPerEvent: 5},
			{Workload: "relay", Name: "backlog to JetStream", MachineCPUUsPerEvent: 40},
		}}}
	// 10 + min(20, 5) + min(30, 40) = 45 µs: 2 CPUs, 44,444 events/s.
	most, how := r.cpuCeiling(rawRequestName)
	if want := 2e6 / 45; math.Abs(most-want) > 1e-6 {
		t.Errorf("estimate %v events/s, want %v: %s", most, want, how)
	}
	if !strings.Contains(how, "backlog row (store append): 5.0") || !strings.Contains(how, "raw_relay: 30.0") || !strings.Contains(how, "(0.44 of raw_insert)") {
		t.Errorf("the note does not name the parts it took: %s", how)
	}
	r.rep.Limits = r.rep.Limits[:2] // neither raw_relay ...
	r.rep.Rows = r.rep.Rows[:1]     // ... nor the relay row: no estimate
	if most, how := r.cpuCeiling(rawRequestName); most != 0 || how != "" {
		t.Errorf("without the relay's measure: %v, %q; want none", most, how)
	}
}

// TestPacedRowsStartSettled: on PostgreSQL every paced row begins after a
// VACUUM of the run's database and a CHECKPOINT, so that what the rows
// before it wrote does not stall its commits and not those of the row it
// is compared with; a server that refuses them gets one note and the rows
// run anyway.
func TestPacedRowsStartSettled(t *testing.T) {
	ctx := context.Background()
	db := pgtest.URL(t)
	conn := pgtest.Connect(t, db)
	if _, err := conn.Exec(ctx, `CREATE TABLE settled (id int PRIMARY KEY); INSERT INTO settled SELECT generate_series(1, 1000); DELETE FROM settled WHERE id % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	rep := &Report{}
	r := &runner{pgURL: db, rep: rep}
	if c := r.beforePaced(ctx); !c.ok || !c.settled {
		t.Fatalf("the server's statistics could not be read (%v), or the row is not marked settled (%v)", c.err, c.settled)
	}
	if len(rep.Notes) != 0 {
		t.Fatalf("notes %q; want none: the server let the bench vacuum and checkpoint", rep.Notes)
	}
	// Only a VACUUM run by hand sets last_vacuum, and no other test
	// vacuums this test's own database.
	var vacuumed bool
	if err := conn.QueryRow(ctx, `SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'settled'`).Scan(&vacuumed); err != nil {
		t.Fatal(err)
	}
	if !vacuumed {
		t.Fatal("the table was not vacuumed before the paced row")
	}
	// A role that may not CHECKPOINT: one note for the run, the counters
	// still read.
	rep = &Report{}
	weak := &runner{pgURL: pgtest.LoginRole(t, db), rep: rep}
	for range 2 {
		if c := weak.beforePaced(ctx); !c.ok || c.settled {
			t.Fatalf("as a plain role: statistics read %v (%v), marked settled %v; want read and not settled", c.ok, c.err, c.settled)
		}
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "could not start after a VACUUM and a CHECKPOINT") || !strings.Contains(rep.Notes[0], "(CHECKPOINT: ") {
		t.Fatalf("notes %q; want one saying the paced rows could not start settled", rep.Notes)
	}
	// A run being cancelled: not settled, and no note blaming the server.
	rep = &Report{}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if c := (&runner{pgURL: db, rep: rep}).beforePaced(cancelled); c.settled || len(rep.Notes) != 0 {
		t.Fatalf("a cancelled run: settled %v, notes %q; want not settled and no note", c.settled, rep.Notes)
	}
	// SQLite: nothing to settle, nothing noted.
	rep = &Report{}
	if c := (&runner{rep: rep}).beforePaced(ctx); c.ok || len(rep.Notes) != 0 {
		t.Fatalf("a run on SQLite: %+v, notes %q", c, rep.Notes)
	}
}

// TestReportRecordsBuildAndCollector: a report records the orisun it
// measured and the environment's GOGC, set or not, and its text says
// which; a report saved before they were recorded says so instead of
// claiming GOGC was unset.
func TestReportRecordsBuildAndCollector(t *testing.T) {
	t.Setenv("GOGC", "400")
	rep := newReport(Config{Backend: "sqlite", Version: "v1.2.3"})
	if rep.Version != "v1.2.3" || rep.GOGC == nil || *rep.GOGC != "400" {
		t.Fatalf("report: version %q, gogc %v; want v1.2.3 and 400", rep.Version, rep.GOGC)
	}
	t.Setenv("GOGC", "")
	if rep := newReport(Config{Backend: "sqlite"}); rep.GOGC == nil || *rep.GOGC != "" {
		t.Fatalf("report with GOGC unset: gogc %v, want recorded as empty", rep.GOGC)
	}
	str := func(v string) *string { return &v }
	for _, tc := range []struct {
		version string
		gogc    *string
		want    string // "": no such line
	}{
		{"v1.2.3", str("400"), "orisun v1.2.3; GOGC 400 (the node's collector tuning off)"},
		{"(devel) 003b8b62c118+dirty", str(""), "orisun (devel) 003b8b62c118+dirty; GOGC unset (the node tunes its collector)"},
		{"", str("200"), "orisun (version not recorded); GOGC 200 (the node's collector tuning off)"},
		{"v1.2.3", nil, "orisun v1.2.3; GOGC not recorded"},
		{"", nil, ""},
	} {
		var b bytes.Buffer
		r := &Report{Backend: "sqlite", Version: tc.version, GOGC: tc.gogc}
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		got := ""
		for line := range strings.Lines(b.String()) {
			if strings.HasPrefix(line, "orisun ") && strings.Contains(line, "; GOGC ") {
				got = strings.TrimSpace(line)
			}
		}
		if got != tc.want {
			t.Errorf("version %q, gogc %v: line %q, want %q", tc.version, tc.gogc, got, tc.want)
		}
		// Saved and read back, the report keeps the difference between
		// unset and not recorded.
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatal(err)
		}
		if (back.GOGC == nil) != (tc.gogc == nil) || back.GOGC != nil && *back.GOGC != *tc.gogc {
			t.Errorf("version %q, gogc %v: read back as %v", tc.version, tc.gogc, back.GOGC)
		}
	}
}
