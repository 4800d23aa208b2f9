package bench

import (
	"testing"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind,
// but for one leak of the bench runner itself, left to its owner.
func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Allow{
		Func: "github.com/orisun-io/orisun/bench.startMeter.func1",
		// TestAppendOnlyRunUsesTheStoresPageSize finds it: runner.startNode
		// (bench.go) starts a meter and returns without finishing it when
		// no relay measurement follows (a run without "relay", such as
		// --only append) or when the node fails to start, so the meter's
		// sampling goroutine runs on until the process ends.
		Why: "bench.go: runner.startNode leaves its meter running when it returns early",
	})
}
