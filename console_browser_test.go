package orisun_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// browser starts a headless Chromium for the console's tests (Debian's
// chromium; ORISUN_TEST_BROWSER names another binary) and collects what
// the page writes to its console as errors. Without a browser the test
// skips, and fails in CI (.ci/run installs one): a browser test that
// silently does not run checks nothing.
func browser(t *testing.T) (ctx context.Context, consoleErrors func() []string) {
	t.Helper()
	path := os.Getenv("ORISUN_TEST_BROWSER")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		testutil.Unavailable(t, "no headless browser: install Debian's chromium (apt-get install chromium) or set ORISUN_TEST_BROWSER")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()))...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	var (
		mu   sync.Mutex
		errs []string
	)
	done := make(chan struct{})
	msgs := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// poll waits up to timeout for the page's expression expr to be true,
// evaluating it every 50 ms. chromedp's poll does not survive a
// navigation: begun while a page loads, it can run in the execution
// context of the page before and fail at once; it is begun again, in the
// new page's context, until the timeout, which bounds the whole wait (a
// context deadline: a poll given under a millisecond would wait forever).
func poll(bctx context.Context, expr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(bctx, deadline)
	defer cancel()
	for {
		left := time.Until(deadline)
		if left < time.Millisecond {
			return fmt.Errorf("not within %s: %w", timeout, chromedp.ErrPollingTimeout)
		}
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(left), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil || !navigationRace(err) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// navigationRace reports whether err is one of the errors of a script run
// in a page that a navigation replaced.
func navigationRace(err error) bool {
	for _, s := range []string{"Cannot find context with specified id", "Execution context was destroyed", "Inspected target navigated or closed"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// artifacts is where the browser tests keep their screenshots: CI sets
// ORISUN_TEST_ARTIFACTS to a temporary directory it keeps; elsewhere a
// test's own temporary directory. Never the repository.
func artifacts(t *testing.T) string {
	dir := os.Getenv("ORISUN_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// windows shows the page at a narrow (390 × 844) and a wide (1440 × 900)
// window, checks that nothing is wider than the window, and writes a
// screenshot of each, name-WxH.png, under artifacts(t). It leaves the
// window wide.
func windows(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	out := artifacts(t)
	for _, size := range [][2]int64{{390, 844}, {1440, 900}} {
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(size[0], size[1])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the page's redraw at the new width (the charts)
		wider, err := chromedp.Run(bctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("body *")).
			filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 5).
			map((e) => e.tagName + "#" + e.id + "." + e.className + " " + Math.round(e.getBoundingClientRect().right)).join("; ")`))
		if err != nil || wider != "" {
			t.Errorf("%dx%d: the page is wider than the window: %s (%v)", size[0], size[1], wider, err)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(out, fmt.Sprintf("%s-%dx%d.png", name, size[0], size[1]))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", file)
	}
}

// TestConsoleOverviewBrowser: in a real headless browser, the overview
// lists the boundaries with the figures /status gives (I7: the page shows
// what was measured); an append moves head within a few seconds without a
// reload (the "a few seconds": 5 s here); a stalled boundary rises
// to the top, marked, with its reason; the page fits a narrow and a wide
// window; the browser's console logs no error (a blocked resource, a
// script exception); and once the node is gone the page says so and keeps
// the last figures.
func TestConsoleOverviewBrowser(t *testing.T) {
	bctx, consoleErrors := browser(t)
	ctx := context.Background()
	dir := t.TempDir()
	n := setup(t, dir, func(c *orisun.Config) {
		withHTTP(c)
		c.Boundaries = []string{"default", "orders"}
		c.PollBackstop = 200 * time.Millisecond
	})
	mustAppend(t, ctx, n, "orders", events(3, "order.placed", 32))
	appendSettled(t, ctx, n, events(5, "ok", 32), 30*time.Second)
	url := "http://" + n.HTTPAddr() + "/console/"
	cell := func(boundary, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-boundary=%q] td.%s')`, boundary, class)
	}
	wait := func(what, expr string, timeout time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		if err := poll(bctx, expr, timeout); err != nil {
			rows, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('tbody tr')).map(r => r.className + ": " + r.innerText).join("\n")`))
			t.Fatalf("%s: not within %s: %v; the rows:\n%s", what, timeout, err, rows)
		}
		return time.Since(start)
	}

	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 900), chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	wait("the overview lists both boundaries", `document.querySelectorAll('tbody tr').length === 2`, 10*time.Second)
	st := httpStatus(t, n)
	for _, b := range st.Boundaries {
		for class, want := range map[string]uint64{"head": b.Head, "published": b.Published, "lag": b.LagEvents} {
			got, err := chromedp.Run(bctx, chromedp.Evaluate[string](cell(b.Name, class)+`.textContent`))
			if err != nil || got != fmt.Sprint(want) {
				t.Errorf("%s %s: page %q, /status %d (%v)", b.Name, class, got, want, err)
			}
		}
		state, err := chromedp.Run(bctx, chromedp.Evaluate[string](cell(b.Name, "state")+`.textContent`))
		if err != nil || !strings.HasPrefix(state, string(b.State)) {
			t.Errorf("%s state: page %q, /status %s (%v)", b.Name, state, b.State, err)
		}
	}

	// An append moves head without a reload.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, ctx, n, "orders", events(4, "order.placed", 32))
	took := wait("head 7 after an append", cell("orders", "head")+`.textContent === "7" && window.notReloaded === true`, 5*time.Second)
	t.Logf("head shown 7 s after the append: %s", took)

	// A stalled boundary: an unpublishable row (data that is not JSON).
	openRaw(t, "sqlite", dir, "").unpublishable(t)
	s := waitState(t, n, "default", "stalled", 30*time.Second, nil)
	took = wait("the stalled boundary first, marked, with its reason",
		`(() => { const r = document.querySelector('tbody tr'); const why = r.querySelector('.reason');
			return r.dataset.boundary === "default" && r.classList.contains("stalled") && why !== null &&
				why.textContent.includes('position 8') && why.textContent.includes('not valid JSON') })()`, 5*time.Second)
	t.Logf("stalled shown %s after /status said so; reason: %s", took, s.Reason)
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('tr.stalled .reason').textContent`))
	if now := boundaryOf(t, httpStatus(t, n), "default"); err != nil || shown != now.Reason {
		t.Errorf("stalled reason: page %q, /status %q (%v)", shown, now.Reason, err)
	}
	bg, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('tr.stalled')).backgroundColor`))
	if err != nil || bg == "" || bg == "rgba(0, 0, 0, 0)" {
		t.Errorf("a stalled row has no background of its own: %q %v", bg, err)
	}

	// The stalled boundary's own page says the same, from its row's link.
	link, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('tr[data-boundary="default"] td.name a').href`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	wait("the stalled boundary's page with its reason", `location.pathname === "/console/boundary/default" &&
		document.getElementById("boundary-state")?.textContent === "stalled" &&
		document.getElementById("reason").textContent.includes("not valid JSON") &&
		document.querySelector("#log li.error")?.textContent.includes("position 8")`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	wait("the overview again", `document.querySelectorAll('tbody tr').length === 2`, 10*time.Second)

	// The order is by state class, then name: a lag that comes and goes
	// does not move a row.
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`rank({state: "leading", lag_events: 9}) === rank({state: "leading", lag_events: 0})`)); err != nil || !same {
		t.Errorf("a lagging boundary ranks apart from one without lag (%v): its row would jump as the lag comes and goes", err)
	}
	// The filter box: the rows whose name, state or reason hold every
	// word typed, kept in the address; cleared, all again.
	typeFilter := func(q string) {
		t.Helper()
		js := fmt.Sprintf(`(() => { const f = document.getElementById("filter"); f.value = %q; f.dispatchEvent(new Event("input")); return true })()`, q)
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](js)); err != nil {
			t.Fatal(err)
		}
	}
	wait("the filter box", `document.getElementById("filter") !== null`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS("#filter"), "ORD")); err != nil {
		t.Fatal(err)
	}
	wait("the filter shows orders alone", `document.querySelectorAll('tbody tr').length === 1 &&
		document.querySelector('tbody tr').dataset.boundary === "orders" && location.search === "?q=ORD" &&
		document.getElementById("summary").textContent.includes("1 shown")`, 5*time.Second)
	typeFilter("stalled position")
	wait("the filter by state and reason shows the stalled boundary", `document.querySelectorAll('tbody tr').length === 1 &&
		document.querySelector('tbody tr').dataset.boundary === "default"`, 5*time.Second)
	typeFilter("nothing-like-it")
	wait("no match, said", `document.querySelectorAll('tbody tr').length === 0 && !document.getElementById("no-match").hidden`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	wait("the overview unfiltered", `document.querySelectorAll('tbody tr').length === 2 && document.getElementById("no-match").hidden`, 10*time.Second)

	// Narrow and wide windows: nothing wider than the window, screenshots.
	windows(t, bctx, "console-overview")
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("the browser's console logged errors:\n%s", strings.Join(errs, "\n"))
	}

	// The node gone: the page keeps the last figures, greyed, and says it
	// has no answer (the failed requests are the browser's console errors
	// from here on, as they should be).
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	wait("the banner of a node that does not answer",
		`!document.getElementById("banner").hidden && document.getElementById("banner").textContent.startsWith("The node does not answer") &&
			document.body.classList.contains("stale") && document.querySelectorAll('tbody tr').length === 2`, 5*time.Second)
}

// TestConsoleBoundaryBrowser: one boundary's page in a real headless
// browser. Its charts draw the node's history and an append moves them
// within a few seconds without a reload (5 s here, the "a few");
// the log finds an event by clicking one of its tags and by a position;
// each event shows its JSON with id, position, epoch, time and tags; the
// live tail shows a new event, holds events back while paused and shows
// them on resume; the page fits a narrow and a wide window; the browser's
// console logs no error. ORISUN_CONSOLE_SCREENSHOT=path writes the wide
// screenshot there too (docs/images/console-boundary.png is made so).
func TestConsoleBoundaryBrowser(t *testing.T) {
	bctx, consoleErrors := browser(t)
	ctx := context.Background()
	n := setup(t, "", func(c *orisun.Config) { withHTTP(c); c.Boundaries = []string{"orders"} })
	waitSampling(t, n, "orders")
	in := events(120, "order.placed", 64)
	for i := range in {
		in[i].Tags = []string{fmt.Sprintf("customer:%d", i%9), fmt.Sprintf("order:%d", i+1)}
	}
	in[63].Type, in[63].Tags = "order.cancelled", []string{"customer:0", "order:64", "refund", "name:Smith, John", " padded "}
	in[63].Data = json.RawMessage(`{"b":1,"a":12345678901234567890,"x":1.0}`)
	if _, err := n.Append(ctx, "orders", in, nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	wait := func(what, expr string, timeout time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		if err := poll(bctx, expr, timeout); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
			t.Fatalf("%s: not within %s: %v; the page:\n%s", what, timeout, err, body)
		}
		return time.Since(start)
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	base := "http://" + n.HTTPAddr() + "/console/boundary/orders"
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 900), chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	chart := `document.getElementById("chart-rate").dataset`
	wait("the charts count the 120 events", chart+`.appendedTotal === "120" && `+chart+`.publishedTotal === "120"`, 10*time.Second)
	wait("the figures of /status", `document.querySelector('[data-figure="head"] b')?.textContent === "120"`, 5*time.Second)

	// An append moves the chart (and head) without a reload.
	eval(`window.notReloaded = "yes"`)
	mustAppend(t, ctx, n, "orders", events(5, "order.placed", 32))
	took := wait("the chart counts 5 more events", chart+`.appendedTotal === "125" && window.notReloaded === "yes"`, 5*time.Second)
	t.Logf("the chart moved %s after the append", took)
	wait("head 125", `document.querySelector('[data-figure="head"] b').textContent === "125"`, 5*time.Second)

	// The log: newest first when the page opened (the 5 appended since are
	// the tail's business), 50 a page; the next page is older; each
	// event's JSON.
	wait("the log's newest page", `document.querySelectorAll('#log li.event').length === 50 &&
		document.querySelector('#log li.event').dataset.position === "120"`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#log-next"))); err != nil {
		t.Fatal(err)
	}
	wait("the next, older page of the log", `document.querySelector('#log li.event')?.dataset.position === "70" &&
		document.querySelectorAll('#log li.event').length === 50`, 5*time.Second)
	doc := eval(`document.querySelector('#log li.event[data-position="64"] pre').textContent`)
	// The data as stored: the digits beyond 2^53, 1.0, the keys' order.
	if want := "\"data\": {\n    \"b\": 1,\n    \"a\": 12345678901234567890,\n    \"x\": 1.0\n  }"; !strings.Contains(doc, want) {
		t.Fatalf("event 64's JSON on the page:\n%s\nwant its data as stored:\n%s", doc, want)
	}
	var e orisun.Event
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		t.Fatalf("event 64's JSON on the page: %v\n%s", err, doc)
	}
	if e.Position != 64 || e.ID == "" || e.Epoch == "" || e.Time.IsZero() || strings.Join(e.Tags, "|") != "customer:0|order:64|refund|name:Smith, John| padded " {
		t.Fatalf("event 64 on the page: %+v", e)
	}
	// By a tag: click it, and the log holds the events with that tag.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#log li.event[data-position="64"] a.tag:nth-of-type(3)`))); err != nil {
		t.Fatal(err)
	}
	wait("the log filtered by the tag refund", `location.search.includes("tags=refund") && document.querySelectorAll('#log li.event').length === 1 &&
		document.querySelector('#log li.event').dataset.position === "64"`, 5*time.Second)
	// Tags with a comma and edge spaces: by their links, and the form sent
	// again as the page filled it.
	// The list shown is marked stale before each click: the wait is for
	// the list that follows it.
	stale := `document.querySelectorAll('#log li.event').forEach((l) => { l.dataset.stale = "yes"; }); "marked"`
	for i, tag := range []string{"name:Smith, John", " padded "} {
		eval(stale)
		if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#log li.event[data-position="64"] a.tag:nth-of-type(%d)`, 4+i)))); err != nil {
			t.Fatal(err)
		}
		found := fmt.Sprintf(`new URLSearchParams(location.search).getAll("tags").join("|") === %q && !document.querySelector('#log li.event[data-stale]') &&
			document.querySelectorAll('#log li.event').length === 1 && document.querySelector('#log li.event').dataset.position === "64"`, tag)
		wait(fmt.Sprintf("the log filtered by the tag %q", tag), found, 5*time.Second)
		eval(stale)
		if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#log-form button[type="submit"]`))); err != nil {
			t.Fatal(err)
		}
		wait(fmt.Sprintf("the form sent again keeps the tag %q whole", tag), found, 5*time.Second)
	}
	// By a position: the form's "from".
	if err := chromedp.Do(bctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	wait("the log's newest page", `document.querySelectorAll('#log li.event').length === 50`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.SetValue(chromedp.CSS("#log-view"), "from"),
		chromedp.SetValue(chromedp.CSS("#log-from"), "101"),
		chromedp.Click(chromedp.CSS(`#log-form button[type="submit"]`))); err != nil {
		t.Fatal(err)
	}
	wait("the log from position 101", `document.querySelector('#log li.event')?.dataset.position === "101" &&
		document.querySelectorAll('#log li.event').length === 25`, 5*time.Second)

	// The live tail: follow from now, a new event shows; paused, the next
	// waits and shows on resume.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-start"))); err != nil {
		t.Fatal(err)
	}
	wait("the tail live", `document.getElementById("tail-state").textContent.startsWith("live")`, 10*time.Second)
	tailed := func(position int) string {
		return fmt.Sprintf(`document.querySelector('#tail li.event[data-position="%d"]') !== null`, position)
	}
	if _, err := n.Append(ctx, "orders", []orisun.Input{{Type: "order.shipped", Data: json.RawMessage(`{"carrier":"post"}`), Tags: []string{"order:7"}}}, nil); err != nil {
		t.Fatal(err)
	}
	took = wait("the tail shows the new event", tailed(126), 5*time.Second)
	t.Logf("the tail showed the new event %s after its append", took)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-pause"))); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, ctx, n, "orders", events(1, "order.placed", 32))
	wait("the paused tail counts the new event", `document.getElementById("tail-state").textContent === "paused · 1 new"`, 5*time.Second)
	if shown := eval(fmt.Sprintf(`String(%s)`, tailed(127))); shown != "false" {
		t.Fatal("the paused tail showed a new event")
	}
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-pause"))); err != nil {
		t.Fatal(err)
	}
	wait("the resumed tail shows the held event", tailed(127), 5*time.Second)
	// The connection lost (as when the node restarts): Follow goes on
	// after the last event shown, so an event appended meanwhile shows
	// (the second review of issue 20: it started from now, and the list
	// kept the old events above a gap no one could see).
	eval(`const es = tail.es; es.close(); es.onerror(); "dropped"`)
	wait("the tail says it was disconnected", `document.getElementById("tail-state").textContent.startsWith("disconnected")`, 5*time.Second)
	mustAppend(t, ctx, n, "orders", events(1, "order.placed", 32))
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-start"))); err != nil {
		t.Fatal(err)
	}
	wait("the tail followed again shows the event appended while it was disconnected", tailed(128), 5*time.Second)

	// Narrow and wide windows.
	windows(t, bctx, "console-boundary")
	if doc := os.Getenv("ORISUN_CONSOLE_SCREENSHOT"); doc != "" {
		// The window at the wide size, scrolled to the top: the figures,
		// the charts, the tail and the log's first events.
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0); true`)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(doc, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot for the docs: %s (%d bytes)", doc, len(png))
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("the browser's console logged errors:\n%s", strings.Join(errs, "\n"))
	}
	// The page closed, its tail's subscription ends on the node.
	if b := boundaryOf(t, httpStatus(t, n), "orders"); b.SubsLive+b.SubsCatchingUp != 1 {
		t.Fatalf("the page's tail is not one subscription in the status: %+v", b)
	}
	// Resumed, the tail sends back the epoch of its first start: a
	// boundary reset while paused (the page's epoch made another, the
	// connection closed as when 1,000 events were held) ends it, saying
	// so, instead of following the new epoch.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-pause"))); err != nil {
		t.Fatal(err)
	}
	eval(`tail.epoch = "e-before-a-reset"; closeTail(); "closed"`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#tail-pause"))); err != nil {
		t.Fatal(err)
	}
	wait("the resumed tail says the boundary was reset", `document.getElementById("tail-state").textContent.includes("the boundary was reset")`, 5*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the tail's subscription to end with its page", 5*time.Second, 20*time.Millisecond, func() bool {
		b := boundaryOf(t, httpStatus(t, n), "orders")
		return b.SubsLive == 0 && b.SubsCatchingUp == 0
	})

	// An address that does not decode (a % escape of no UTF-8) is said,
	// not a blank page with a script exception.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+n.HTTPAddr()+"/console/boundary/%FF")); err != nil {
		t.Fatal(err)
	}
	wait("the page of a malformed address says so", `document.getElementById("banner").textContent.includes("does not name a boundary")`, 5*time.Second)
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("the browser's console logged errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestConsoleEventPagesLoginBrowser: with the console's credentials
// configured, a browser without them, or with a wrong password, sees the
// boundary's charts but no event: the log and the tail offer the login
// instead, and the event routes answer 401; with the right password the
// log shows the events. The browser's only console errors are those 401s.
func TestConsoleEventPagesLoginBrowser(t *testing.T) {
	bctx, consoleErrors := browser(t)
	ctx := context.Background()
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.Boundaries = []string{"orders"}
		c.NATSUser, c.NATSPassword = "app", "app-pass"
		c.ConsoleUser, c.ConsolePassword = "ops", "ops-password"
	})
	mustAppend(t, ctx, n, "orders", events(3, "order.placed", 32))
	wait := func(what, expr string) {
		t.Helper()
		if err := poll(bctx, expr, 10*time.Second); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
			t.Fatalf("%s: not within 10 s: %v; the page:\n%s", what, err, body)
		}
	}
	login := func(password string) {
		t.Helper()
		h := network.Headers{}
		if password != "" {
			h["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+password))
		}
		if _, err := chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	page := "http://" + n.HTTPAddr() + "/console/boundary/orders"
	if err := chromedp.Do(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	refused := `document.getElementById("log-gate-login") !== null && document.getElementById("tail-gate-login") !== null &&
		document.querySelectorAll("li.event").length === 0 && document.getElementById("log-form").hidden &&
		document.getElementById("chart-rate").dataset.end !== undefined`
	wait("no login: the charts, and the login offered for the events", refused)
	for _, pw := range []string{"wrong-password", "app-pass"} {
		login(pw)
		if err := chromedp.Do(bctx, chromedp.Reload()); err != nil {
			t.Fatal(err)
		}
		wait("password "+pw+": the login offered, no event", refused)
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.refused = null; fetch("/console/events/orders?from=1",
			{headers: {"X-Orisun-Console": "fetch"}}).then(async (r) => { window.refused = r.status + " " + await r.text() }); true`)); err != nil {
			t.Fatal(err)
		}
		wait("password "+pw+": the log's data refused", `window.refused !== null && window.refused.startsWith("401 ") &&
			window.refused.includes("the event pages need the console's credentials")`)
	}
	login("ops-password")
	if err := chromedp.Do(bctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	wait("the right password: the log", `document.querySelectorAll("#log li.event").length === 3 && !document.getElementById("log-form").hidden`)
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "401") {
			t.Errorf("the browser's console logged an error other than a refused login: %s", e)
		}
	}
}

// TestConsoleShowsStagedBrowser (I7, docs/outbox.md "Visibility"): a
// boundary whose committed enqueued events wait in the staging (its lease
// is held by a node that does not move them) is published to its head, yet
// the node is not settled: the overview says why in the boundary's row, the
// staged count and the oldest's age.
func TestConsoleShowsStagedBrowser(t *testing.T) {
	bctx, consoleErrors := browser(t)
	url := pgtest.URL(t)
	ctx := context.Background()
	heldElsewhere(t, url)
	n := setup(t, "", func(c *orisun.Config) { c.Backend, c.PGURL = "postgres", url; withHTTP(c) })
	if _, err := pgtest.Connect(t, url).Exec(ctx, `SELECT orisun_enqueue('held', '[{"type":"app","data":1},{"type":"app","data":2}]')`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 900), chromedp.Navigate("http://"+n.HTTPAddr()+"/console/")); err != nil {
		t.Fatal(err)
	}
	expr := `(() => { const r = document.querySelector('tr[data-boundary="held"]'); return r !== null &&
		Array.from(r.querySelectorAll('.reason')).some(e => e.textContent.includes('2 enqueued events staged')) &&
		document.querySelector('#health').textContent.includes('not settled') })()`
	if err := poll(bctx, expr, 10*time.Second); err != nil {
		rows, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('tbody tr')).map(r => r.innerText).join("\n")`))
		t.Fatalf("the overview does not say that 2 enqueued events wait in boundary held's staging: %v; the rows:\n%s", err, rows)
	}
	if errs := consoleErrors(); len(errs) != 0 {
		t.Fatalf("the browser's console logged errors: %q", errs)
	}
}
