package orisun_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/orisun-io/orisun"
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
		msg := "no headless browser: install Debian's chromium (apt-get install chromium) or set ORISUN_TEST_BROWSER"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
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
	if _, err := n.Append(ctx, "orders", events(3, "order.placed", 32), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "default", events(5, "ok", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	url := "http://" + n.HTTPAddr() + "/console/"
	cell := func(boundary, class string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-boundary=%q] td.%s')`, boundary, class)
	}
	wait := func(what, expr string, timeout time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
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
	if _, err := n.Append(ctx, "orders", events(4, "order.placed", 32), nil); err != nil {
		t.Fatal(err)
	}
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

	// Narrow and wide windows: nothing wider than the window, screenshots.
	out := artifacts(t)
	for _, size := range [][2]int64{{390, 844}, {1440, 900}} {
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(size[0], size[1])); err != nil {
			t.Fatal(err)
		}
		wider, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		if err != nil || wider {
			t.Errorf("%dx%d: the page is wider than the window (%v)", size[0], size[1], err)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(out, fmt.Sprintf("console-overview-%dx%d.png", size[0], size[1]))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", file)
	}
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
