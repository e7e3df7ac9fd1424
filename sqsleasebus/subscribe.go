package sqsleasebus

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// Subscription is a consumer of one SQS queue. It is a poller.Source[T],
// so a worker pool runs over it unchanged, and a backend.Rejecter,
// backend.DelayFailer, backend.PoolPoller[T] and backend.Remote. Several
// Subscriptions (in one process or many) on the same queue compete for its
// messages, as SQS consumers do. Its methods are safe for concurrent use.
//
// The mapping of each call to SQS, and what SQS cannot promise, is in the
// package documentation.
type Subscription[T any] struct {
	client *sqs.Client
	url    string
	name   string // the queue's name: the last element of its URL
	codec  queue.Codec[T]
	cfg    config
	scope  uint64 // the lease IDs' scope: drawn at random per Subscription

	closed    chan struct{}
	closeOnce sync.Once
	stop      context.CancelFunc // ends the receives in flight, at Close
	base      context.Context    // the receives' and moves' parent: ended by Close
	bg        sync.WaitGroup     // expiry watchers and dead-letter moves (Close waits for them)
	acks      acker              // coalesces concurrent Acks

	mu      sync.Mutex                         // guards everything below
	attrs   queueAttrs                         // as last read
	readAt  time.Time                          // when attrs were read
	seq     uint64                             // the last lease's Seq
	leases  *backend.LeaseTable[string, *held] // the current leases this Subscription handed out, and each SQS MessageId's latest here
	retired retired                            // leases settled without a delete, or superseded
	moving  int                                // dead-letter moves in flight in the background
	moved   chan struct{}                      // closed when moving drops to 0; nil while it is 0
}

// held is one current lease.
type held struct {
	m        types.Message
	id       string // m.MessageId
	attempt  int
	first    time.Time // the message's first receive: SQS caps its visibility at 12 hours from it
	deadline time.Time
	timer    backend.Timer // a last attempt's expiry: moves it to the DLQ
	stopT    chan struct{} // closed to stop the timer's goroutine; nil: no timer
}

// queueAttrs is what the subscription reads of its queue.
type queueAttrs struct {
	arn        string
	fifo       bool
	vis        time.Duration // the queue's VisibilityTimeout
	maxReceive int           // RedrivePolicy's maxReceiveCount; 0: no policy
	dlqARN     string
	dlqURL     string
}

var (
	_ poller.Source[string]          = (*Subscription[string])(nil)
	_ backend.Rejecter               = (*Subscription[string])(nil)
	_ backend.DelayFailer            = (*Subscription[string])(nil)
	_ backend.PoolPoller[string]     = (*Subscription[string])(nil)
	_ backend.Remote                 = (*Subscription[string])(nil)
	_ backend.Clocked                = (*Subscription[string])(nil)
	_ interface{ Close() error }     = (*Subscription[string])(nil)
	_ interface{ QueueURL() string } = (*Subscription[string])(nil)
)

// Subscribe opens a consumer of the SQS queue at queueURL, whose message
// bodies codec decodes (nil: queue.StringCodec or queue.BytesCodec for
// string and []byte payloads, queue.JSONCodec otherwise).
//
// It reads the queue's attributes first: a queue that does not exist (or
// a RedrivePolicy naming a dead-letter queue that does not) is refused
// with a *QueueError matching ErrQueueNotFound, credentials that may not
// read it with one matching ErrAccessDenied, and attributes that
// contradict opts with one matching ErrMisconfigured. A nil client, a
// queueURL that is not a URL, or a bad option is refused with an error
// matching queue.ErrInvalidArgument.
func Subscribe[T any](ctx context.Context, client *sqs.Client, queueURL string, codec queue.Codec[T], opts ...Option) (*Subscription[T], error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, backend.Invalid("Subscribe: a nil *sqs.Client")
	}
	name := queueName(queueURL)
	if name == "" {
		return nil, backend.Invalid("Subscribe: queue URL %q names no queue", queueURL)
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	s := &Subscription[T]{
		client: client, url: queueURL, name: name, codec: codec, cfg: cfg,
		scope:  rand.Uint64() | 1,
		closed: make(chan struct{}),
		leases: backend.NewLeaseTable(func(h *held) string { return h.id }),
	}
	a, err := s.readAttrs(ctx)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(queueURL, a); err != nil {
		return nil, err
	}
	s.attrs, s.readAt = a, cfg.clk.Now()
	s.base, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// check refuses attributes of the queue at url that contradict c.
func (c config) check(url string, a queueAttrs) error {
	switch {
	case c.maxAttempts > 0 && a.maxReceive == 0:
		return misconfigured(url, "WithMaxAttempts(%d), but the queue has no RedrivePolicy: SQS would redeliver a message forever", c.maxAttempts)
	case c.maxAttempts > 0 && c.maxAttempts != a.maxReceive:
		return misconfigured(url, "WithMaxAttempts(%d), but the queue's RedrivePolicy has maxReceiveCount %d", c.maxAttempts, a.maxReceive)
	}
	return nil
}

// readAttrs reads the queue's attributes and finds its dead-letter queue.
func (s *Subscription[T]) readAttrs(ctx context.Context) (queueAttrs, error) {
	out, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return queueAttrs{}, queueError(s.url, "read attributes", err)
	}
	at := out.Attributes
	a := queueAttrs{arn: at["QueueArn"], fifo: at["FifoQueue"] == "true"}
	if v, err := strconv.Atoi(at["VisibilityTimeout"]); err == nil {
		a.vis = time.Duration(v) * time.Second
	} else {
		return queueAttrs{}, misconfigured(s.url, "VisibilityTimeout %q is not a number of seconds", at["VisibilityTimeout"])
	}
	if p := at["RedrivePolicy"]; p != "" {
		var rp struct {
			Target string          `json:"deadLetterTargetArn"`
			Max    json.RawMessage `json:"maxReceiveCount"`
		}
		if err := json.Unmarshal([]byte(p), &rp); err != nil {
			return queueAttrs{}, misconfigured(s.url, "RedrivePolicy %q: %v", p, err)
		}
		n, err := strconv.Atoi(strings.Trim(string(rp.Max), `"`)) // a number, or a number in a string
		if err != nil || n < 1 || rp.Target == "" {
			return queueAttrs{}, misconfigured(s.url, "RedrivePolicy %q: no dead-letter target or maxReceiveCount", p)
		}
		a.maxReceive, a.dlqARN = n, rp.Target
		a.dlqURL, err = s.findQueue(ctx, rp.Target)
		if err != nil {
			return queueAttrs{}, err
		}
	}
	return a, nil
}

// findQueue returns the URL of the queue whose ARN is arn.
func (s *Subscription[T]) findQueue(ctx context.Context, arn string) (string, error) {
	parts := strings.Split(arn, ":") // arn:aws:sqs:region:account:name
	var in *sqs.GetQueueUrlInput
	switch {
	case len(parts) == 6 && parts[5] != "":
		in = &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
		if parts[4] != "" {
			in.QueueOwnerAWSAccountId = aws.String(parts[4])
		}
	case len(parts) == 1 && arn != "":
		// A bare queue name, as goaws writes its targets.
		in = &sqs.GetQueueUrlInput{QueueName: aws.String(arn)}
	default:
		return "", misconfigured(s.url, "dead-letter target %q is not an SQS queue ARN", arn)
	}
	out, err := s.client.GetQueueUrl(ctx, in)
	if err != nil {
		return "", queueError(arn, "find the dead-letter queue", err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// refresh reads the queue's attributes again when the refresh period has
// passed. A failed read keeps what was read before: the next Poll tries
// again.
func (s *Subscription[T]) refresh(ctx context.Context) {
	s.mu.Lock()
	due := !s.cfg.clk.Now().Before(s.readAt.Add(s.cfg.refresh))
	if due {
		s.readAt = s.cfg.clk.Now() // one reader at a time
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if a, err := s.readAttrs(ctx); err == nil {
		s.mu.Lock()
		s.attrs = a
		s.mu.Unlock()
	}
}

// QueueURL returns the queue's URL.
func (s *Subscription[T]) QueueURL() string { return s.url }

// Name returns the queue's name.
func (s *Subscription[T]) Name() string { return s.name }

// MaxAttempts returns the queue's attempt limit as last read (its
// RedrivePolicy's maxReceiveCount), 0 for none.
func (s *Subscription[T]) MaxAttempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs.maxReceive
}

// Clock returns the clock the Subscription reads (WithClock):
// backend.Clocked, so that a pool over it reads the same one.
func (s *Subscription[T]) Clock() clock.Clock { return s.cfg.clk }

// Remote reports true: each Poll is a round trip to SQS.
func (s *Subscription[T]) Remote() bool { return true }

// Close ends the Subscription: a Poll blocked in a receive returns an
// error matching queue.ErrClosed, and every later call too. Dead-letter
// moves in flight finish first. The leases it holds are not released:
// SQS makes each message visible again when its visibility timeout
// passes. A second Close returns nil.
func (s *Subscription[T]) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.mu.Lock()
		for _, h := range s.leases.All() {
			h.stopTimer()
		}
		s.mu.Unlock()
		s.bg.Wait()
		s.stop()
	})
	return nil
}

func (s *Subscription[T]) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// queueName returns the last path element of an SQS queue URL, or "".
func queueName(url string) string {
	rest, ok := strings.CutPrefix(url, "https://")
	if !ok {
		rest, ok = strings.CutPrefix(url, "http://")
	}
	if !ok {
		return ""
	}
	_, path, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	name := path[strings.LastIndexByte(path, '/')+1:]
	return name
}
