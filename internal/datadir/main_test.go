package datadir_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain lets the test binary run as the child "lock holder"
// (testutil.StartChild), which holds a directory's lock
// (DATADIR_CHILD_DIR) under a name (DATADIR_CHILD_HOLDER) until it is
// killed; otherwise it runs the tests.
func TestMain(m *testing.M) {
	testutil.Children(map[string]func() int{"lock holder": holdLock})
	testutil.Main(m)
}

// holdLock is the child "lock holder": it takes the lock, says "locked"
// and waits to be killed.
func holdLock() int {
	l, err := datadir.Acquire(os.Getenv("DATADIR_CHILD_DIR"))
	if err == nil {
		err = l.Claim(os.Getenv("DATADIR_CHILD_HOLDER"))
	}
	if err != nil {
		fmt.Println("child:", err)
		return 1
	}
	fmt.Println("locked")
	time.Sleep(time.Hour)
	return 0
}
