package outbox_test

import (
	"testing"

	"github.com/orisun-io/orisun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
