package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// openPTY opens a pseudo-terminal: its master side, and its slave side,
// which is the terminal a command reads as stdin.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	ioctl := func(req uintptr, arg unsafe.Pointer) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), req, uintptr(arg)); errno != 0 {
			t.Fatalf("ioctl %#x on /dev/ptmx: %v", req, errno)
		}
	}
	var n uint32
	ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	var unlock int32
	ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestAppendSaysItReadsATerminal: `orisun append` without --type on a
// terminal says on stderr that it reads JSON lines and how to end them,
// then reads what is typed up to Ctrl-D (review of issue 18: it waited in
// silence); from a pipe or /dev/null it says nothing.
func TestAppendSaysItReadsATerminal(t *testing.T) {
	master, slave := openPTY(t)
	if !interactive(slave) {
		t.Fatal("a terminal is not interactive")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"/dev/null": null, "a pipe": r} {
		if interactive(f) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}

	// A line, then Ctrl-D (VEOF): the terminal ends the input. The
	// command reads the event, then finds no node (exit 3).
	if _, err := master.Write([]byte(`{"type":"a","data":1}` + "\n\x04")); err != nil {
		t.Fatal(err)
	}
	stdin = slave
	defer func() { stdin = os.Stdin }()
	var out, errw strings.Builder
	code := run([]string{"append", "default", "-s", "nats://127.0.0.1:1", "--timeout", "1s"}, &out, &errw)
	if !strings.Contains(errw.String(), "reading events from stdin, one JSON object per line") || !strings.Contains(errw.String(), "end with Ctrl-D") {
		t.Errorf("append on a terminal: stderr %q; want the note on what it reads and how to end", errw.String())
	}
	if code != exitUnavailable {
		t.Errorf("append on a terminal: exit %d, want %d (the event read, no node there): %q", code, exitUnavailable, errw.String())
	}

	errw.Reset()
	stdin = null
	if code := run([]string{"append", "default", "-s", "nats://127.0.0.1:1"}, &out, &errw); code == 0 || strings.Contains(errw.String(), "Ctrl-D") {
		t.Errorf("append from /dev/null: exit %d, stderr %q; want a failure (no events) and no note", code, errw.String())
	}
}
