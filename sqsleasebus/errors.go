package sqsleasebus

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Errors returned by this package, matched with errors.Is. A refusal at
// Subscribe is a *QueueError that matches one of the first three and
// wraps the SQS error it came from, if any.
var (
	// ErrQueueNotFound: the queue, or the dead-letter queue its
	// RedrivePolicy names, does not exist.
	ErrQueueNotFound = errors.New("sqsleasebus: queue not found")
	// ErrAccessDenied: the client's credentials may not read the queue.
	ErrAccessDenied = errors.New("sqsleasebus: access denied")
	// ErrMisconfigured: the queue's attributes contradict an option (for
	// example WithMaxAttempts against the RedrivePolicy's
	// maxReceiveCount), or are unreadable.
	ErrMisconfigured = errors.New("sqsleasebus: queue attributes contradict the options")
	// ErrUnsupported: SQS has no such thing (a priority, a TTL, an
	// ordering key's concurrency limit, a release that spends no
	// attempt): the option or call names it. It matches
	// errors.ErrUnsupported too, as every backend's refusal of an option
	// does.
	ErrUnsupported = fmt.Errorf("sqsleasebus: not supported by SQS: %w", errors.ErrUnsupported)
)

// QueueError is a refusal of a queue: which queue, what was being done,
// and why (an error matching ErrQueueNotFound, ErrAccessDenied or
// ErrMisconfigured, joined with the SQS error if there was one).
type QueueError struct {
	QueueURL string // the queue's URL, or its ARN where the URL is unknown
	Op       string // what was being done: "read attributes", "find the dead-letter queue", ...
	Err      error
}

// Error says which queue, what was being done, and why.
func (e *QueueError) Error() string {
	return fmt.Sprintf("sqsleasebus: %s of %s: %v", e.Op, e.QueueURL, e.Err)
}

// Unwrap returns the cause.
func (e *QueueError) Unwrap() error { return e.Err }

// queueError classifies err, an SQS API error from an operation on the
// queue at url: a missing queue, access denied, or else err as it is.
func queueError(url, op string, err error) error {
	var (
		missing *types.QueueDoesNotExist
		api     smithy.APIError
	)
	switch {
	case errors.As(err, &missing):
		return &QueueError{QueueURL: url, Op: op, Err: errors.Join(ErrQueueNotFound, err)}
	case errors.As(err, &api):
		switch api.ErrorCode() {
		case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
			return &QueueError{QueueURL: url, Op: op, Err: errors.Join(ErrQueueNotFound, err)}
		case "AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "UnrecognizedClientException",
			"MissingAuthenticationToken", "SignatureDoesNotMatch", "KMS.AccessDeniedException":
			return &QueueError{QueueURL: url, Op: op, Err: errors.Join(ErrAccessDenied, err)}
		}
	}
	return fmt.Errorf("sqsleasebus: %s of %s: %w", op, url, err)
}

// misconfigured returns a *QueueError matching ErrMisconfigured that says
// what contradicts what.
func misconfigured(url, format string, args ...any) error {
	return &QueueError{QueueURL: url, Op: "check attributes", Err: fmt.Errorf("%w: %s", ErrMisconfigured, fmt.Sprintf(format, args...))}
}

// apiCode returns the error code of an SQS API error, or "".
func apiCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}
