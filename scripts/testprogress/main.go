// Command testprogress turns the JSON of `go test -json` (on standard input)
// into go test's usual short output, and says every so often which tests
// are still running, so that a run whose root package takes minutes is not
// silent for minutes. scripts/test pipes go test through it.
//
// What it prints: each package's closing line (ok, FAIL, ?), the output of
// every test that failed, all the output of a package that failed (a
// panic, a timeout's stacks, the output of tests that never ended), build
// errors, and a line naming the running tests once per interval (-every,
// default 30s; 0 turns it off). It exits 1 when a package or a test failed
// or did not build, else 0; go test's own exit status stays the one that
// counts (scripts/test takes the worse of the two).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

// pkgState is what is kept of a package while its tests run.
type pkgState struct {
	lines   []string            // its own output, not a test's
	tests   map[string][]string // output of each test not ended yet
	started map[string]time.Time
}

type printer struct {
	mu     sync.Mutex
	w      io.Writer
	start  time.Time
	pkgs   map[string]*pkgState
	done   int
	failed bool
	// last is when a line was last printed: a progress line is printed
	// only after a silence of the interval.
	last time.Time
}

// print writes s and notes the time.
func (p *printer) print(s string) {
	if s != "" {
		fmt.Fprint(p.w, s)
		p.last = time.Now()
	}
}

func newPrinter(w io.Writer) *printer {
	return &printer{w: w, start: time.Now(), pkgs: map[string]*pkgState{}}
}

func (p *printer) pkg(name string) *pkgState {
	s := p.pkgs[name]
	if s == nil {
		s = &pkgState{tests: map[string][]string{}, started: map[string]time.Time{}}
		p.pkgs[name] = s
	}
	return s
}

// handle takes one line of go test's output.
func (p *printer) handle(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var e event
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Action == "" {
		p.print(line + "\n") // not test2json: pass it on
		return
	}
	switch e.Action {
	case "build-output":
		p.print(e.Output)
	case "build-fail":
		p.failed = true
	case "start":
		p.pkg(e.Package)
	case "run":
		s := p.pkg(e.Package)
		s.started[e.Test] = time.Now()
	case "output":
		s := p.pkg(e.Package)
		if e.Test == "" {
			s.lines = append(s.lines, e.Output)
		} else if !strings.HasPrefix(e.Output, "=== ") { // RUN, PAUSE, CONT: -v's, not go test's usual

			s.tests[e.Test] = append(s.tests[e.Test], e.Output)
		}
	case "pass", "fail", "skip":
		s := p.pkg(e.Package)
		if e.Test != "" {
			if e.Action == "fail" {
				p.failed = true
				p.print(strings.Join(s.tests[e.Test], ""))
			}
			delete(s.tests, e.Test)
			delete(s.started, e.Test)
			return
		}
		p.endPackage(e.Package, s, e.Action == "fail")
	}
}

// endPackage prints a package's closing line, and when it failed all it
// printed besides its tests and the output of the tests that never ended.
func (p *printer) endPackage(name string, s *pkgState, failed bool) {
	p.done++
	delete(p.pkgs, name)
	if !failed {
		for _, l := range s.lines {
			if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "? ") || strings.HasPrefix(l, "?\t") {
				p.print(l)
			}
		}
		return
	}
	p.failed = true
	names := make([]string, 0, len(s.tests))
	for t := range s.tests {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		p.print(strings.Join(s.tests[t], ""))
	}
	p.print(strings.Join(s.lines, ""))
}

// progress says which top-level tests run and for how long, unless
// something was printed within the last interval.
func (p *printer) progress(now time.Time, every time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.last) < every {
		return
	}
	var parts []string
	pkgNames := make([]string, 0, len(p.pkgs))
	for name := range p.pkgs {
		pkgNames = append(pkgNames, name)
	}
	slices.Sort(pkgNames)
	for _, name := range pkgNames {
		s := p.pkgs[name]
		type running struct {
			name string
			for_ time.Duration
		}
		var rs []running
		for t, at := range s.started {
			if !strings.Contains(t, "/") {
				rs = append(rs, running{t, now.Sub(at)})
			}
		}
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b running) int { return int(b.for_ - a.for_) })
		var ts []string
		for i, r := range rs {
			if i == 3 {
				ts = append(ts, fmt.Sprintf("+%d more", len(rs)-3))
				break
			}
			ts = append(ts, fmt.Sprintf("%s %s", r.name, r.for_.Round(time.Second)))
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, strings.Join(ts, ", ")))
	}
	what := "building or starting packages"
	if len(parts) > 0 {
		what = "running " + strings.Join(parts, "; ")
	}
	p.print(fmt.Sprintf("testprogress: %s in, %d packages done; %s\n", now.Sub(p.start).Round(time.Second), p.done, what))
}

func run(in io.Reader, out io.Writer, every time.Duration) int {
	p := newPrinter(out)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					p.progress(now, every)
				}
			}
		}()
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		p.handle(sc.Text())
	}
	close(stop)
	wg.Wait()
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testprogress: reading go test's output: %v\n", err)
		return 1
	}
	if p.failed {
		fmt.Fprintln(out, "FAIL")
		return 1
	}
	return 0
}

func main() {
	every := flag.Duration("every", 30*time.Second, "how often to name the running tests (0: never)")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *every))
}
