package leasebuspubsub

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gocloud.dev v0.47.0, pubsub.go:570: the goroutine of a
		// ReceiveBatch that returned messages sends on an unbuffered
		// channel that only a waiting Receive reads. A Receive that finds
		// the messages already queued returns them without reading it, so
		// when the program stops receiving right then, the goroutine stays
		// blocked after Shutdown (which does not unblock it). Not the
		// driver's: any driver that can return messages from a
		// ReceiveBatch while no Receive waits (a prefetch) triggers it.
		// The messages it queued are released by the driver's Close.
		goleak.IgnoreTopFunction("gocloud.dev/pubsub.(*Subscription).Receive.func2"),
	)
}

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second
