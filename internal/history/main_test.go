package history_test

import (
	"testing"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind.
func TestMain(m *testing.M) { testutil.Main(m) }
