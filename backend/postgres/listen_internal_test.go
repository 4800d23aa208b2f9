package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestBackendPIDsKnowTheServerRun: a process id of the pool's is its own
// only for the run of the server it connected to (a later run reuses the
// ids), and each connection leaves the set as the pool closes it, even
// while another connection names the same process.
func TestBackendPIDsKnowTheServerRun(t *testing.T) {
	b := newBackendPIDs()
	c1, c2 := &pgx.Conn{}, &pgx.Conn{}
	b.add(c1, backendKey{started: 100, pid: 7})
	if !b.has(backendKey{100, 7}) {
		t.Fatal("the pool's process 7 of the run started at 100 is not its own")
	}
	if b.has(backendKey{200, 7}) {
		t.Fatal("process 7 of a later run (started at 200) taken for the pool's: a dead connection's id would hide another node's notifications")
	}
	b.add(c2, backendKey{started: 100, pid: 7}) // a dead one and a new one, one id
	b.remove(c1)
	if !b.has(backendKey{100, 7}) {
		t.Fatal("closing the dead connection removed the live one's process")
	}
	b.remove(c2)
	b.remove(c2) // closed twice: nothing more
	if b.has(backendKey{100, 7}) || len(b.n) != 0 || len(b.conns) != 0 {
		t.Fatalf("after both closed: %v %v, want an empty set", b.n, b.conns)
	}
}
