package leasebuspubsub

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second
