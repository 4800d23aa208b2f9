package orisun_test

// The tests of this file are about the data directory's lock with
// PostgreSQL (docs/design.md §9): where a node may run without it, and
// what a copy of a locked directory may take.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// readOnlyDir returns a directory this process cannot write in: a
// read-only tmpfs mounted for the test as root (root writes into a
// directory without write permission anyway), else a directory without
// write permission. A root that cannot mount skips the test, except under
// CI (CI=true), where it fails.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	} else {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("cannot mount a read-only tmpfs on %s (%v: %s): as root that needs CAP_SYS_ADMIN", dir, err,
				strings.TrimSpace(string(out)))
			testutil.Unavailable(t, msg)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", dir, err, out)
			}
		})
	}
	if f, err := os.CreateTemp(dir, "probe-*"); err == nil {
		f.Close()
		t.Fatalf("%s was to be read-only, and a file could be created in it", dir)
	}
	return dir
}

// TestStatelessNodeOnReadOnlyDataDir: with PostgreSQL and an external NATS
// (ORISUN_NATS_URL) a node keeps nothing in its data directory but the
// lock file (and the node-id file, unless ORISUN_NODE_ID is set): a
// stateless container with a read-only file system and ORISUN_NODE_ID ran
// before the directory was locked, and it still does. It starts without
// the lock, logs a WARN that names ORISUN_DATA_DIR and says that a restart
// then waits ORISUN_LEASE_TTL, and publishes. Another process holding the
// lock of a writable directory still refuses the node; with the embedded
// NATS (JetStream's store lives there) the read-only directory fails the
// start, named.
func TestStatelessNodeOnReadOnlyDataDir(t *testing.T) {
	url := pgtest.URL(t)
	ns := usersNATS(t)
	ro := readOnlyDir(t)
	logs := &syncBuffer{}
	stateless := func(c *orisun.Config) {
		ns.join(c, url)
		c.NodeID = "stateless-1"
	}
	n := setup(t, ro, stateless, orisun.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if _, err := n.Append(context.Background(), "default", events(5, "ro", 32), nil); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 30*time.Second)
	var warn string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "the data directory cannot be locked") {
			warn = line
		}
	}
	for _, want := range []string{"ORISUN_DATA_DIR", "ORISUN_LEASE_TTL", "data_dir=" + ro} {
		if !strings.Contains(warn, want) {
			t.Fatalf("no WARN about the missing lock that names %q; the log:\n%s", want, logs.String())
		}
	}
	if _, err := os.Stat(filepath.Join(ro, datadir.LockFile)); !os.IsNotExist(err) {
		t.Fatalf("a lock file in the read-only directory: %v", err)
	}

	// A writable directory another process has locked: refused, as before.
	held := t.TempDir()
	l, err := datadir.Acquire(held)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	cfg := orisun.Config{DataDir: held, NATSPort: -1, LeaseTTL: 2 * time.Second}
	stateless(&cfg)
	cfg.NodeID = "stateless-2"
	other, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = other.Start(context.Background())
	other.Stop()
	if want := "ORISUN_DATA_DIR: data directory " + fmt.Sprintf("%q", held) + " is locked by another orisun process"; err == nil ||
		!strings.Contains(err.Error(), want) {
		t.Fatalf("a stateless node on a directory locked by another process: %v, want an error containing %q", err, want)
	}

	// The embedded NATS keeps JetStream's store in the directory: refused.
	embedded, err := orisun.New(orisun.Config{DataDir: ro, NATSPort: -1, Backend: "postgres", PGURL: url, NodeID: "embedded"})
	if err != nil {
		t.Fatal(err)
	}
	err = embedded.Start(context.Background())
	embedded.Stop()
	if err == nil || !strings.Contains(err.Error(), "ORISUN_DATA_DIR") || !strings.Contains(err.Error(), ro) {
		t.Fatalf("an embedded NATS on a read-only data directory: %v, want an error naming ORISUN_DATA_DIR and %s", err, ro)
	}
}

// mountImage mounts the ext4 file system in the image file img, through a
// loop device, on a new directory until the test ends, and returns the
// directory. fresh makes the file system first (16 MiB). It needs root and
// the mount tools: a machine without them skips the test, except under CI
// (CI=true), where it fails.
func mountImage(t *testing.T, img string, fresh bool) string {
	t.Helper()
	need := func(what string, err error, out []byte) {
		t.Helper()
		msg := fmt.Sprintf("%s: %v: %s (a cloned volume is an ext4 image on a loop device: that needs root and mkfs.ext4)", what, err,
			strings.TrimSpace(string(out)))
		testutil.Unavailable(t, msg)
	}
	if os.Geteuid() != 0 {
		need("not root", nil, nil)
	}
	if fresh {
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 16<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", img).CombinedOutput(); err != nil {
			need("mkfs.ext4 "+img, err, out)
		}
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		need("mount -o loop "+img, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// inodeOf is the inode number of the file at path.
func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestClonedVolumeStopsTakingLiveLeases_I6: node A runs on PostgreSQL and a
// shared NATS (placement on) with its data directory on a volume (an ext4
// image); the volume is cloned while A runs (frozen, the image copied), so
// the copy's lock file keeps its inode number and names A's holder as an
// ended process, and node B starts on the copy. The lock file cannot tell
// (docs/design.md §9): B takes A's leases early at its start. But A's
// heartbeat, written after B's first, proves A alive: B says so in a WARN
// that names A's holder and the lock file and says to delete LOCK and
// node-id in a copy, and from then on it takes none of A's leases early.
// Placement evens the two out at two boundaries each and every boundary
// is published (I4); each early takeover was the next term (I6). Before,
// B went on taking A's live leases early whenever it acquired one.
func TestClonedVolumeStopsTakingLiveLeases_I6(t *testing.T) {
	work := t.TempDir()
	imgA, imgB := filepath.Join(work, "a.img"), filepath.Join(work, "b.img")
	dirA := filepath.Join(mountImage(t, imgA, true), "data")
	url := pgtest.URL(t)
	ns := usersNATS(t)
	ttl := 2 * time.Second
	names := []string{"b0", "b1", "b2", "b3"}
	cfg := func(c *orisun.Config) {
		ns.join(c, url)
		c.Boundaries = names
		c.LeaseTTL = ttl
	}
	a := setup(t, dirA, cfg)
	waitCounts(t, []*orisun.Node{a}, []int{4}, 30*time.Second)
	stA, err := a.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	holderA := stA.LeaseHolder

	// The clone: A's file system frozen for a consistent copy of its image.
	mntA := filepath.Dir(dirA)
	if out, err := exec.Command("fsfreeze", "-f", mntA).CombinedOutput(); err != nil {
		t.Fatalf("fsfreeze -f %s: %v: %s", mntA, err, out)
	}
	out, err := exec.Command("cp", "--sparse=always", imgA, imgB).CombinedOutput()
	if fout, ferr := exec.Command("fsfreeze", "-u", mntA).CombinedOutput(); ferr != nil {
		t.Fatalf("fsfreeze -u %s: %v: %s", mntA, ferr, fout)
	}
	if err != nil {
		t.Fatalf("cp %s %s: %v: %s", imgA, imgB, err, out)
	}
	dirB := filepath.Join(mountImage(t, imgB, false), "data")
	lockA, lockB := filepath.Join(dirA, datadir.LockFile), filepath.Join(dirB, datadir.LockFile)
	if ia, ib := inodeOf(t, lockA), inodeOf(t, lockB); ia != ib {
		t.Fatalf("the copy's lock file is inode %d, the original's %d: not a clone that keeps inode numbers, the test would show nothing", ib, ia)
	}
	if b, err := os.ReadFile(lockB); err != nil || !strings.Contains(string(b), fmt.Sprintf("holder %q", holderA)) {
		t.Fatalf("the copy's lock file does not name A's holder %q (err %v):\n%s", holderA, err, b)
	}

	logsB := &syncBuffer{}
	b := setup(t, dirB, cfg, orisun.WithLogger(slog.New(slog.NewTextHandler(logsB, nil))))
	if !strings.Contains(logsB.String(), "earlier_holders=["+holderA+"]") {
		t.Fatalf("B does not take A's holder %q for an ended process of its directory:\n%s", holderA, logsB.String())
	}
	early := func() int {
		return strings.Count(logsB.String(), "previous_holder="+holderA)
	}
	const found = "an earlier holder named in the data directory's lock file is alive"
	started := time.Now()
	for !strings.Contains(logsB.String(), found) {
		if time.Since(started) > 10*ttl {
			t.Fatalf("B did not find A alive within %s; meanwhile it took A's live leases early %d times:\n%s",
				10*ttl, early(), logsB.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var warn string
	for line := range strings.Lines(logsB.String()) {
		if strings.Contains(line, found) {
			warn = line
		}
	}
	for _, want := range []string{"level=WARN", "holder=" + holderA, "lock_file=" + lockB, "Delete LOCK and node-id"} {
		if !strings.Contains(warn, want) {
			t.Fatalf("B's warning does not say %q: %s", want, warn)
		}
	}
	atStart := early()
	for line := range strings.Lines(logsB.String()) {
		if !strings.Contains(line, "previous_holder="+holderA) {
			continue
		}
		var term, prev uint64
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "term="); ok {
				term, _ = strconv.ParseUint(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(f, "previous_term="); ok {
				prev, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		if term == 0 || term != prev+1 {
			t.Fatalf("I6: an early takeover was not the next term: %s", line)
		}
	}
	t.Logf("B found A alive %s after its start, having taken %d of A's leases early", time.Since(started).Round(time.Millisecond), atStart)

	nodes := []*orisun.Node{a, b}
	waitCounts(t, nodes, []int{2, 2}, 60*time.Second)
	terms := leaseTerms(t, a)
	time.Sleep(5 * ttl) // fifteen placement rounds, each standby of B acquiring now and then
	if n := early() - atStart; n != 0 {
		t.Fatalf("after it found A alive B took A's live leases early %d more times:\n%s", n, logsB.String())
	}
	if after := leaseTerms(t, a); fmt.Sprint(after) != fmt.Sprint(terms) {
		t.Fatalf("leases changed hands after placement settled: terms %v, then %v", terms, after)
	}
	for _, name := range names {
		if _, err := a.Append(context.Background(), name, events(3, "clone", 32), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, a, 30*time.Second)
	waitSettled(t, b, 30*time.Second)
}
