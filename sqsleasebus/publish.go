package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/backend"
	"github.com/leasebus/leasebus/queue"
)

// SQS's limits on what is sent.
const (
	maxMessageSize = 1 << 20 // a message's body and attributes, and a batch's total: 1 MiB
)

// ErrTooLarge is matched by the error of a Publish whose message, body
// and attributes together, is over SQS's 1 MiB (or a PublishBatch entry
// so): nothing is sent.
var ErrTooLarge = errors.New("sqsleasebus: message over SQS's 1 MiB")

// Publisher sends messages to one SQS queue, as the broker's Publish does
// to a topic: what SQS has of the broker's PublishOptions it maps, what it
// has not it refuses by name (ErrUnsupported). A message it sends is a
// plain SQS message (the body is the codec's payload, headers are String
// message attributes), so any SQS consumer reads it, and any SQS producer's
// messages reach a Subscription. Its methods are safe for concurrent use.
type Publisher[T any] struct {
	client *sqs.Client
	url    string
	name   string
	fifo   bool // the queue is FIFO (its name ends in .fifo, as SQS requires)
	codec  queue.Codec[T]
	clk    clock.Clock
}

// NewPublisher returns a Publisher to the queue at queueURL, encoding
// payloads with codec (nil: as Subscribe's default). It makes no request:
// a queue that does not exist is an error of the first Publish (a
// *QueueError matching ErrQueueNotFound). A queue whose name ends in
// ".fifo" is FIFO. Of the Options only WithClock applies (it stamps
// the returned messages' PublishedAt); any other is refused, as are a nil
// client and a URL that names no queue (queue.ErrInvalidArgument).
func NewPublisher[T any](client *sqs.Client, queueURL string, codec queue.Codec[T], opts ...Option) (*Publisher[T], error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.only("Publisher", "WithClock"); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, backend.Invalid("NewPublisher: a nil *sqs.Client")
	}
	name := queueName(queueURL)
	if name == "" {
		return nil, backend.Invalid("NewPublisher: queue URL %q names no queue", queueURL)
	}
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	return &Publisher[T]{client: client, url: queueURL, name: name, fifo: strings.HasSuffix(name, ".fifo"), codec: codec, clk: cfg.clk}, nil
}

// QueueURL returns the queue's URL.
func (p *Publisher[T]) QueueURL() string { return p.url }

// Publish sends payload (SendMessage) and returns the message as a
// Subscription will see it: its ID is SQS's MessageId, Topic the queue's
// name, PublishedAt the publisher's clock's now. On a FIFO queue a
// publish whose dedup ID SQS has seen within its 5-minute window is
// accepted and not stored again: the Message returned has the first
// one's ID, which SQS returns.
func (p *Publisher[T]) Publish(ctx context.Context, payload T, opts ...PublishOption) (queue.Message[T], error) {
	pc, err := p.setup(opts)
	if err != nil {
		return queue.Message[T]{}, err
	}
	if pc.dedupIDs != nil {
		return queue.Message[T]{}, backend.Invalid("WithDedupIDs: only for PublishBatch; Publish takes WithDedupID")
	}
	e, msg, err := p.entry(payload, &pc, pc.dedupID, 0)
	if err != nil {
		return queue.Message[T]{}, err
	}
	out, err := p.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(p.url), MessageBody: e.MessageBody, DelaySeconds: e.DelaySeconds,
		MessageAttributes: e.MessageAttributes, MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId,
	})
	if err != nil {
		return queue.Message[T]{}, queueError(p.url, "publish", err)
	}
	msg.ID = messageID(p.url, aws.ToString(out.MessageId))
	return msg, nil
}

// PublishBatch sends payloads in order, ten to a SendMessageBatch (SQS's
// limit; fewer when ten would pass its 1 MiB a request), one request
// after another so that a FIFO group keeps the order given, with the same
// options for each (WithDedupIDs gives each its dedup ID). It returns the
// messages as Publish does; an entry SQS refused, or left unanswered,
// has the zero Message in its place, and its error (naming the entry) is
// joined in the error returned. On a FIFO queue
// a batch resent with the same dedup IDs is stored once. An empty batch
// returns nil.
func (p *Publisher[T]) PublishBatch(ctx context.Context, payloads []T, opts ...PublishOption) ([]queue.Message[T], error) {
	pc, err := p.setup(opts)
	if err != nil {
		return nil, err
	}
	if pc.dedupID != "" {
		return nil, backend.Invalid("WithDedupID: one ID cannot name many messages; PublishBatch takes WithDedupIDs")
	}
	if pc.dedupIDs != nil && len(pc.dedupIDs) != len(payloads) {
		return nil, backend.Invalid("WithDedupIDs: %d ids for %d payloads", len(pc.dedupIDs), len(payloads))
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(payloads))
	sizes := make([]int, len(payloads))
	out := make([]queue.Message[T], len(payloads))
	for i, payload := range payloads {
		var dedup string
		if pc.dedupIDs != nil {
			dedup = pc.dedupIDs[i]
		}
		if entries[i], out[i], err = p.entry(payload, &pc, dedup, i); err != nil {
			return nil, fmt.Errorf("payload %d: %w", i, err)
		}
		sizes[i] = entrySize(entries[i])
	}
	var errs []error
	for lo := 0; lo < len(entries); {
		hi, size := lo, 0
		for hi < len(entries) && hi-lo < maxBatch && size+sizes[hi] <= maxMessageSize {
			size += sizes[hi]
			hi++
		}
		res, err := p.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(p.url), Entries: entries[lo:hi]})
		if err != nil {
			for i := lo; i < len(entries); i++ {
				out[i] = queue.Message[T]{}
			}
			return out, errors.Join(append(errs, fmt.Errorf("payloads %d to %d not sent: %w", lo, len(entries)-1, queueError(p.url, "publish", err)))...)
		}
		answered := make([]bool, hi-lo)
		for _, ok := range res.Successful {
			if i, in := entryIndex(ok.Id, lo, hi); in {
				answered[i-lo] = true
				out[i].ID = messageID(p.url, aws.ToString(ok.MessageId))
			}
		}
		for _, f := range res.Failed {
			if i, in := entryIndex(f.Id, lo, hi); in {
				answered[i-lo] = true
				out[i] = queue.Message[T]{}
				errs = append(errs, fmt.Errorf("sqsleasebus: publish to %s, payload %d: %s: %s", p.url, i, aws.ToString(f.Code), aws.ToString(f.Message)))
			}
		}
		for k, ok := range answered {
			if !ok {
				out[lo+k] = queue.Message[T]{}
				errs = append(errs, fmt.Errorf("sqsleasebus: publish to %s, payload %d: SendMessageBatch did not answer it", p.url, lo+k))
			}
		}
		lo = hi
	}
	return out, errors.Join(errs...)
}

// setup applies opts and checks them against the queue.
func (p *Publisher[T]) setup(opts []PublishOption) (publishConfig, error) {
	var pc publishConfig
	for _, o := range opts {
		if o.apply == nil {
			pc.fail(backend.Invalid("a zero PublishOption"))
			continue
		}
		o.apply(&pc)
	}
	if pc.err != nil {
		return pc, pc.err
	}
	switch {
	case p.fifo && pc.key == "":
		return pc, backend.Invalid("a FIFO queue (%s) orders by message group: give WithKey (its MessageGroupId)", p.name)
	case !p.fifo && pc.key != "":
		return pc, fmt.Errorf("WithKey(%q): %w: a standard queue (%s) has no order to keep; a FIFO queue's message group is a key", pc.key, ErrUnsupported, p.name)
	case !p.fifo && (pc.dedupID != "" || pc.dedupIDs != nil):
		return pc, fmt.Errorf("WithDedupID: %w: a standard queue (%s) does not deduplicate; a FIFO queue does", ErrUnsupported, p.name)
	case p.fifo && pc.delay > 0:
		return pc, fmt.Errorf("WithDelay(%v): %w: a FIFO queue (%s) takes no delay per message, only its DelaySeconds attribute", pc.delay, ErrUnsupported, p.name)
	}
	return pc, nil
}

// attrName is what SQS accepts as a message attribute's name.
var attrName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// entry builds the batch entry (Id i) of payload, and the message as it
// will be read.
func (p *Publisher[T]) entry(payload T, pc *publishConfig, dedup string, i int) (types.SendMessageBatchRequestEntry, queue.Message[T], error) {
	body, err := p.codec.Encode(nil, payload)
	if err != nil {
		return types.SendMessageBatchRequestEntry{}, queue.Message[T]{}, fmt.Errorf("sqsleasebus: encode: %w", err)
	}
	e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))}
	if pc.delay > 0 {
		e.DelaySeconds = secs(pc.delay)
	}
	if p.fifo {
		e.MessageGroupId = aws.String(pc.key)
		if dedup == "" {
			dedup = uuid.NewString() // none given: this publish is its own
		}
		e.MessageDeduplicationId = aws.String(dedup)
	}
	if len(pc.headers) > 0 {
		e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(pc.headers))
		for k, v := range pc.headers {
			e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	if n := entrySize(e); n > maxMessageSize {
		return e, queue.Message[T]{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	msg := queue.Message[T]{Topic: p.name, Key: pc.key, Payload: payload, PublishedAt: p.clk.Now()}
	if len(pc.headers) > 0 {
		msg.Headers = queue.NewHeaders(pc.headers)
	}
	return e, msg, nil
}

// entrySize is what SQS counts of e against its 1 MiB: the body, and each
// attribute's name, type and value.
func entrySize(e types.SendMessageBatchRequestEntry) int {
	n := len(aws.ToString(e.MessageBody))
	for k, v := range e.MessageAttributes {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// messageID returns the leasebus ID of the SQS MessageId mid of the queue
// at url: itself when it is a UUID (as SQS's are), else a UUID derived
// from the queue and it.
func messageID(url, mid string) uuid.UUID {
	id, err := uuid.Parse(mid)
	if err != nil {
		id = uuid.NewSHA1(uuid.NameSpaceURL, []byte(url+"#"+mid))
	}
	return id
}

// PublishOption adjusts one Publish or PublishBatch. They are the
// broker's, as far as SQS has them.
type PublishOption struct{ apply func(*publishConfig) }

type publishConfig struct {
	key      string
	delay    time.Duration
	headers  map[string]string
	dedupID  string
	dedupIDs []string
	err      error
}

func (c *publishConfig) fail(err error) { c.err = errors.Join(c.err, err) }

// WithKey sets the message's ordering key: on a FIFO queue, where it is
// required, its MessageGroupId (SQS delivers a group's messages in order,
// one receive's worth at a time, as the broker holds back a key's later
// messages). A standard queue has no groups: a key there is refused
// (ErrUnsupported). A Subscription reports a FIFO message's group as its
// Key, whoever sent it.
func WithKey(key string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.key = key }}
}

// WithDelay makes the message visible d after the send (DelaySeconds,
// rounded up to whole seconds). d must be in [0, 15m], SQS's limit; a
// FIFO queue takes no delay per message (ErrUnsupported).
func WithDelay(d time.Duration) PublishOption {
	return PublishOption{func(c *publishConfig) {
		if d < 0 || d > maxDelay {
			c.fail(backend.Invalid("WithDelay(%v): must be in [0, 15m]", d))
			return
		}
		c.delay = d
	}}
}

// WithHeaders sends h as String message attributes, which a Subscription
// reports as the message's Headers. SQS allows 10 attributes, named with
// letters, digits, '-', '_' and '.' (not starting "AWS." or "Amazon.", nor
// "leasebus-", which this package keeps for itself): more, or another
// name, is refused (queue.ErrInvalidArgument).
func WithHeaders(h map[string]string) PublishOption {
	return PublishOption{func(c *publishConfig) {
		if len(h) > maxAttributes {
			c.fail(backend.Invalid("WithHeaders: %d headers, SQS allows %d message attributes", len(h), maxAttributes))
			return
		}
		for k := range h {
			lower := strings.ToLower(k)
			if !attrName.MatchString(k) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") || strings.HasPrefix(lower, "leasebus-") {
				c.fail(backend.Invalid("WithHeaders: %q is not a name SQS (or this package) allows for a message attribute", k))
				return
			}
		}
		c.headers = maps.Clone(h)
	}}
}

// WithDedupID sets the message's MessageDeduplicationId on a FIFO queue:
// SQS stores a second send of the same ID within 5 minutes once. A
// standard queue does not deduplicate (ErrUnsupported). Without it a
// FIFO send is its own (a fresh ID). Invalid in PublishBatch (see
// WithDedupIDs).
func WithDedupID(id string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.dedupID = id }}
}

// WithDedupIDs gives each payload of a PublishBatch its dedup ID, as
// WithDedupID does for one ("" for a fresh one). It must hold one ID per
// payload.
func WithDedupIDs(ids []string) PublishOption {
	return PublishOption{func(c *publishConfig) { c.dedupIDs = append([]string{}, ids...) }}
}

// WithPriority is the broker's WithPriority, refused: any priority but
// queue.PriorityNormal (accepted, and the default) fails the publish with
// an error matching ErrUnsupported. SQS delivers a queue's messages with
// no ranking; a priority is a queue of its own, polled first.
func WithPriority(pr queue.Priority) PublishOption {
	return PublishOption{func(c *publishConfig) {
		switch {
		case pr < queue.PriorityLow || pr > queue.PriorityCritical:
			c.fail(backend.Invalid("WithPriority: %d is not a priority", pr))
		case pr != queue.PriorityNormal:
			c.fail(fmt.Errorf("WithPriority(%v): %w: SQS does not rank messages; use a queue per priority", pr, ErrUnsupported))
		}
	}}
}

// WithTTL is the broker's WithTTL, refused with an error matching
// ErrUnsupported: SQS keeps every message of a queue for its
// MessageRetentionPeriod, and deletes it then without a dead letter.
func WithTTL(d time.Duration) PublishOption {
	return PublishOption{func(c *publishConfig) {
		c.fail(fmt.Errorf("WithTTL(%v): %w: a queue's MessageRetentionPeriod is the one time to live SQS has, and it deletes without a dead letter", d, ErrUnsupported))
	}}
}
