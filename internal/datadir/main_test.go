package datadir_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain lets the test binary run as a child that holds a directory's
// lock (DATADIR_CHILD_DIR) under a name (DATADIR_CHILD_HOLDER) until it is
// killed; otherwise it runs the tests.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DATADIR_CHILD_DIR"); dir != "" {
		l, err := datadir.Acquire(dir)
		if err == nil {
			err = l.Claim(os.Getenv("DATADIR_CHILD_HOLDER"))
		}
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Hour)
	}
	testutil.Main(m)
}
