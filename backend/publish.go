package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasebus/leasebus/queue"
)

// Publisher is the publishing seam: what a backend offers to publish, as
// poller.Source is what it offers to consume. A *broker.Broker is one, and
// so are the JetStream, SQS and PostgreSQL backends' publishers;
// everything built on publishing (package schedule's jobs, the outbox's
// relay) is written once against it. Package backend/publishtest checks a
// backend against the contract below.
//
// Publish publishes payload to topic with opts (queue.PublishOptions is
// what they make) and returns the message as subscribers will see it. An
// option the backend cannot carry is refused by name, with an error
// matching errors.ErrUnsupported (see Unsupported), and an invalid
// argument with one matching queue.ErrInvalidArgument; either way nothing
// is published, and CheckPublish returns the same refusal. A publish whose
// dedup ID (queue.WithDedupID) the backend saw on topic within its dedup
// window stores nothing and returns nil: the original message where the
// backend still holds it, else this call's. A ctx that is done before the
// publish returns its error. A topic that does not exist is an error
// matching queue.ErrTopicNotFound.
type Publisher[T any] interface {
	Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error)
	PublishChecker
}

// PublishChecker is the part of a Publisher that says, before anything is
// sent, what it will refuse for good: CheckPublish returns the error
// Publish returns for a publish to topic with o that is refused whatever
// the backend's state (a topic name it does not take, an option it cannot
// carry, a dedup ID too long), or nil if Publish would try. It makes no
// request and does not look topic up: a topic that does not exist yet is
// not refused here. The outbox checks a row with it at Enqueue, so that a
// row its relay could never publish is refused in the caller's
// transaction.
type PublishChecker interface {
	CheckPublish(topic string, o queue.PublishOptions) error
}

// Unsupported returns an error matching errors.ErrUnsupported whose text
// says what the backend cannot carry and why: the one way every backend
// refuses an option by name.
//
//	return backend.Unsupported("WithPriority(%v): a stream delivers in publish order", p)
func Unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errors.ErrUnsupported, fmt.Sprintf(format, args...))
}
