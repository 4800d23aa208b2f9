package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Command is what StartProcess runs.
type Command struct {
	// Name is how failures and logs call the process; the binary's base
	// name when empty.
	Name string
	Path string
	Args []string
	// Env is added to the test binary's environment, less its ORISUN_*
	// variables (a developer's own must not configure the child; the
	// ORISUN_TEST_* variables of scripts/test stay). A later value of a
	// variable wins over an earlier one.
	Env []string
	// KeepLines bounds the output kept to its last KeepLines lines (0: all
	// of it), for a process that logs much for long.
	KeepLines int
	// Dir is the working directory; the test binary's when empty.
	Dir string
}

// stopGrace is how long the cleanup of StartProcess waits for a process
// to end after SIGTERM before it sends SIGKILL.
const stopGrace = 10 * time.Second

// quitGrace is how long Stop gives a process to print its stacks after
// SIGQUIT before it sends SIGKILL.
const quitGrace = 2 * time.Second

// failTail is how many of its last lines of output a process logs when
// the test failed.
const failTail = 300

// Process is a child process a test started: its standard output and
// standard error, line by line in the order written, kept for the test to
// wait on (WaitLine, NextLine) and look at (Lines, Logged, Tail).
type Process struct {
	Name string
	Cmd  *exec.Cmd

	done   chan struct{} // closed once the process was waited for and its output read
	exited atomic.Bool   // set just before done is closed
	keep   int
	mu     sync.Mutex
	lines  []string
	first  int           // number of lines[0]: the lines before it were dropped (KeepLines)
	grew   chan struct{} // closed at the next line or at the end of the output
	ended  bool          // the output ended
	cursor int           // the next line NextLine returns
}

// StartProcess starts c with its output kept, and ends it when the test
// ends (SIGCONT, for a process the test stopped, then SIGTERM, then SIGKILL
// after stopGrace), logging its last lines of output if the test failed.
// On Linux the child also dies with the test binary (a timeout, a ^C).
func StartProcess(t testing.TB, c Command) *Process {
	t.Helper()
	name := c.Name
	if name == "" {
		name = filepath.Base(c.Path)
	}
	p := &Process{Name: name, Cmd: exec.Command(c.Path, c.Args...), done: make(chan struct{}),
		keep: c.KeepLines, grew: make(chan struct{})}
	p.Cmd.Env = append(childEnv(), c.Env...)
	p.Cmd.Dir = c.Dir
	dieWithParent(p.Cmd)
	// One pipe for both streams: the lines stay in the order written.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = w, w
	err = p.Cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.read(r)
	}()
	go func() {
		p.Cmd.Wait()
		// The output ends when the last holder of the pipe's write end
		// exits; a grandchild may hold it longer: stop reading then.
		select {
		case <-read:
		case <-time.After(5 * time.Second):
		}
		r.Close()
		<-read
		p.exited.Store(true)
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Stop(stopGrace) {
			t.Logf("%s did not end within %s of SIGTERM: SIGQUIT (its goroutines' stacks are at the end of its output), then killed", name, stopGrace)
		}
		if t.Failed() {
			t.Logf("last lines of %s's output:\n%s", name, p.Tail(failTail))
		}
	})
	return p
}

// StartNode starts the orisun command (OrisunBinary, `orisun serve`)
// with a data directory of the test's, NATS on a random port and the
// status listener on a random loopback port, and env on top of those.
func StartNode(t testing.TB, name string, env ...string) *Process {
	t.Helper()
	return StartProcess(t, Command{Name: name, Path: OrisunBinary(t), Env: append([]string{
		"ORISUN_DATA_DIR=" + t.TempDir(), "ORISUN_NATS_PORT=-1", "ORISUN_HTTP_ADDR=127.0.0.1:0",
	}, env...)})
}

// childEnv is this process's environment less the ORISUN_* variables but
// ORISUN_TEST_*.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ORISUN_") && !strings.HasPrefix(kv, "ORISUN_TEST_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// maxLine bounds a line kept; the rest of a longer one is dropped.
const maxLine = 64 << 10

func (p *Process) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		text := string(line[:min(len(line), maxLine)])
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n') // the rest of an overlong line
		}
		if text = strings.TrimRight(text, "\r\n"); text != "" || err == nil {
			p.add(text)
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	p.ended = true
	close(p.grew)
	p.mu.Unlock()
}

func (p *Process) add(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line)
	if p.keep > 0 && len(p.lines) > 2*p.keep {
		drop := len(p.lines) - p.keep
		p.lines = append([]string(nil), p.lines[drop:]...)
		p.first += drop
	}
	close(p.grew)
	p.grew = make(chan struct{})
}

// Done is closed once the process has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited (and its output is read).
func (p *Process) Exited() bool { return p.exited.Load() }

// Wait waits for the process to exit and returns its state.
func (p *Process) Wait() *os.ProcessState {
	<-p.done
	return p.Cmd.ProcessState
}

// Signal sends sig to the process if it still runs, and never to anything
// else (its pid may be reused once it was waited for).
func (p *Process) Signal(sig os.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s has exited (%s)", p.Name, p.Cmd.ProcessState)
	}
	return p.Cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone; it fails the
// test when the process had already exited.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", p.Name, err)
	}
	<-p.done
}

// Stop ends the process, if it runs: SIGCONT (it may be stopped), SIGTERM,
// and once grace has passed SIGQUIT, so that a Go program that hangs prints
// every goroutine's stack to its output (for the test's log) as it exits,
// then SIGKILL. It returns false when SIGTERM was not enough.
func (p *Process) Stop(grace time.Duration) bool {
	if p.Exited() {
		return true
	}
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(quitGrace):
			p.Signal(syscall.SIGKILL)
			<-p.done
		}
		return false
	}
}

// LineCount returns how many lines the process has written so far: a mark
// for LinesFrom.
func (p *Process) LineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first + len(p.lines)
}

// LinesFrom returns the lines from the one numbered n (0 is the first the
// process wrote) on, of those kept.
func (p *Process) LinesFrom(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines[min(max(n-p.first, 0), len(p.lines)):]...)
}

// Lines returns the output's lines kept so far.
func (p *Process) Lines() []string { return p.LinesFrom(0) }

// Logged reports whether a line of the output contains every one of words.
func (p *Process) Logged(words ...string) bool {
	for _, l := range p.Lines() {
		if containsAll(l, words) {
			return true
		}
	}
	return false
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// Tail returns the last n lines of the output.
func (p *Process) Tail(n int) string {
	lines := p.Lines()
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// NextLine returns the next line of output after the last one NextLine or
// WaitLine returned, waiting up to timeout for it. ok is false once the
// output has ended (the process exited) and every line was returned. It
// fails the test when timeout passes first.
func (p *Process) NextLine(t testing.TB, timeout time.Duration) (line string, ok bool) {
	t.Helper()
	line, got := p.next(timeout)
	if got == waitTimedOut {
		t.Fatalf("%s wrote no line within %s; its last output:\n%s", p.Name, timeout, p.Tail(20))
	}
	return line, got == lineRead
}

// WaitLine returns the next line of output that contains s (see NextLine),
// waiting up to timeout for it. It fails the test when the process ends or
// timeout passes first.
func (p *Process) WaitLine(t testing.TB, s string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		line, got := p.next(time.Until(deadline))
		switch got {
		case lineRead:
			if strings.Contains(line, s) {
				return line
			}
		case outputEnded:
			t.Fatalf("%s ended (%s) before it wrote a line containing %q; its last output:\n%s",
				p.Name, p.Wait(), s, p.Tail(20))
		case waitTimedOut:
			t.Fatalf("%s wrote no line containing %q within %s; its last output:\n%s", p.Name, s, timeout, p.Tail(20))
		}
	}
}

const (
	lineRead = iota
	outputEnded
	waitTimedOut
)

// next returns the line at the cursor and moves the cursor past it,
// waiting up to wait for it.
func (p *Process) next(wait time.Duration) (string, int) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		p.cursor = max(p.cursor, p.first)
		if i := p.cursor - p.first; i < len(p.lines) {
			p.cursor++
			line := p.lines[i]
			p.mu.Unlock()
			return line, lineRead
		}
		done, grew := p.ended, p.grew
		p.mu.Unlock()
		if done {
			return "", outputEnded
		}
		select {
		case <-grew:
		case <-timer.C:
			return "", waitTimedOut
		}
	}
}
