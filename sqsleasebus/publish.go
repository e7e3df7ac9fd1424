package sqsleasebus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

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
// so): nothing is sent. It matches queue.ErrInvalidArgument too: the
// same message is refused again, whatever the queue holds.
var ErrTooLarge = fmt.Errorf("sqsleasebus: message over SQS's 1 MiB: %w", queue.ErrInvalidArgument)

// Publisher sends messages to SQS queues, as the broker's Publish does to
// topics: a topic is the name of a queue of the client's account and
// region (found once with GetQueueUrl, then kept), so it is the
// backend.Publisher of SQS, which package schedule and the outbox's relay
// publish through. A message it sends is a plain SQS message (the body is
// the codec's payload, headers are String message attributes), so any SQS
// consumer reads it, and any SQS producer's messages reach a
// Subscription. Its methods are safe for concurrent use.
//
// Of queue.PublishOptions it carries:
//
//   - Headers, as String message attributes: at most 10, named with
//     letters, digits, '-', '_' and '.', not starting "AWS." or "Amazon."
//     (SQS's own) nor "leasebus-dead-letter" (this package's); a
//     Subscription reports them as the message's Headers;
//   - Key, on a FIFO queue, as its MessageGroupId: SQS delivers a group's
//     messages in order, one receive's worth at a time, as the broker
//     holds back a key's later messages. A FIFO message without a key is a
//     group of its own, so that it waits for no other, as a message
//     without a key on the broker; a Subscription reports no key for it. A
//     standard queue has no groups: a key there is refused (ErrUnsupported);
//   - DedupID, on a FIFO queue, as its MessageDeduplicationId: SQS stores
//     a second send of the same ID within 5 minutes once, and returns the
//     first's MessageId. At most 128 characters, letters, digits and
//     punctuation. A standard queue does not deduplicate (ErrUnsupported).
//     Without it a FIFO send is its own (a fresh ID);
//   - Delay, on a standard queue, as DelaySeconds (rounded up to whole
//     seconds), at most 15 minutes; a FIFO queue takes no delay per
//     message, only its DelaySeconds attribute (ErrUnsupported).
//
// It refuses, by name (ErrUnsupported), a Priority other than normal (SQS
// does not rank messages; a priority is a queue of its own, polled first)
// and a TTL (a queue's MessageRetentionPeriod is the one time to live SQS
// has, and it deletes without a dead letter).
type Publisher[T any] struct {
	client *sqs.Client
	codec  queue.Codec[T]
	clk    clock.Clock

	mu   sync.Mutex        // guards urls
	urls map[string]string // by topic (queue name): the queue's URL, once found
}

// NewPublisher returns a Publisher to the queues client reaches, encoding
// payloads with codec (nil: as Subscribe's default). It makes no request:
// a queue that does not exist is an error of the first Publish to it
// (matching queue.ErrTopicNotFound and ErrQueueNotFound). Of the Options
// only WithClock applies (it stamps the returned messages' PublishedAt);
// any other is refused, as is a nil client (queue.ErrInvalidArgument).
func NewPublisher[T any](client *sqs.Client, codec queue.Codec[T], opts ...Option) (*Publisher[T], error) {
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
	if codec == nil {
		codec = queue.DefaultCodec[T]()
	}
	return &Publisher[T]{client: client, codec: codec, clk: cfg.clk, urls: map[string]string{}}, nil
}

// queueNameRE is what SQS takes as a queue's name: 1 to 80 letters,
// digits, '-' and '_', a FIFO queue's ending in ".fifo" (within the 80).
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}(\.fifo)?$|^[A-Za-z0-9_-]{76,80}$`)

// dedupIDRE is what SQS takes as a MessageDeduplicationId: 1 to 128
// letters, digits and punctuation.
var dedupIDRE = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,./:;<=>?@\\[\\]^_`{|}~-]{1,128}$")

// CheckPublish returns the error Publish returns for a publish to topic
// with o that SQS refuses whatever its queues hold, or nil (see
// backend.PublishChecker): a name no queue can have, an option the queue's
// kind (FIFO or standard, by its name) cannot carry, a header name SQS
// does not take, a dedup ID SQS does not take.
func (p *Publisher[T]) CheckPublish(topic string, o queue.PublishOptions) error {
	if !queueNameRE.MatchString(topic) {
		return backend.Invalid("topic %q: an SQS queue's name is 1 to 80 letters, digits, '-' and '_', a FIFO one's ending in .fifo", topic)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	fifo := strings.HasSuffix(topic, ".fifo")
	switch {
	case o.Priority != queue.PriorityNormal:
		return fmt.Errorf("WithPriority(%v): %w: SQS does not rank messages; use a queue per priority", o.Priority, ErrUnsupported)
	case o.TTL > 0:
		return fmt.Errorf("WithTTL(%v): %w: a queue's MessageRetentionPeriod is the one time to live SQS has, and it deletes without a dead letter", o.TTL, ErrUnsupported)
	case !fifo && o.Key != "":
		return fmt.Errorf("WithKey(%q): %w: a standard queue (%s) has no order to keep; a FIFO queue's message group is a key", o.Key, ErrUnsupported, topic)
	case !fifo && (o.DedupID != "" || o.DedupIDs != nil):
		return fmt.Errorf("WithDedupID: %w: a standard queue (%s) does not deduplicate; a FIFO queue does", ErrUnsupported, topic)
	case fifo && o.Delay > 0:
		return fmt.Errorf("WithDelay(%v): %w: a FIFO queue (%s) takes no delay per message, only its DelaySeconds attribute", o.Delay, ErrUnsupported, topic)
	case o.Delay > maxDelay:
		return backend.Invalid("WithDelay(%v): must be in [0, 15m]", o.Delay)
	case len(o.Key) > 128-len(unkeyed):
		return backend.Invalid("WithKey: %d bytes, SQS takes a message group of %d", len(o.Key), 128-len(unkeyed))
	case strings.HasPrefix(o.Key, unkeyed):
		return backend.Invalid("WithKey(%q): the prefix %q is this package's, for messages without a key", o.Key, unkeyed)
	case len(o.Headers) > maxAttributes:
		return backend.Invalid("WithHeaders: %d headers, SQS allows %d message attributes", len(o.Headers), maxAttributes)
	}
	for _, id := range append([]string{o.DedupID}, o.DedupIDs...) {
		if id != "" && !dedupIDRE.MatchString(id) {
			return backend.Invalid("dedup ID %q: SQS takes 1 to 128 letters, digits and punctuation", id)
		}
	}
	for k := range o.Headers {
		lower := strings.ToLower(k)
		if !attrName.MatchString(k) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") || strings.HasPrefix(lower, attrDeadLetter) {
			return backend.Invalid("WithHeaders: %q is not a name SQS (or this package) allows for a message attribute", k)
		}
	}
	return nil
}

// unkeyed begins the MessageGroupId of a FIFO message published without a
// key: a group of its own.
const unkeyed = "leasebus-unkeyed-"

// keyOf returns the key of a message in the FIFO group group: none for a
// group of its own (unkeyed).
func keyOf(group string) string {
	if strings.HasPrefix(group, unkeyed) {
		return ""
	}
	return group
}

// url returns the URL of topic's queue: GetQueueUrl once, then kept.
func (p *Publisher[T]) url(ctx context.Context, topic string) (string, error) {
	p.mu.Lock()
	u, ok := p.urls[topic]
	p.mu.Unlock()
	if ok {
		return u, nil
	}
	out, err := p.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	if err != nil {
		err = queueError(topic, "find the queue", err)
		if errors.Is(err, ErrQueueNotFound) {
			err = fmt.Errorf("%w: %w", queue.ErrTopicNotFound, err)
		}
		return "", err
	}
	u = aws.ToString(out.QueueUrl)
	p.mu.Lock()
	p.urls[topic] = u
	p.mu.Unlock()
	return u, nil
}

// setup applies opts and checks them against topic, for a batch of n
// payloads (n < 0: a Publish).
func (p *Publisher[T]) setup(ctx context.Context, topic string, opts []queue.PublishOption, n int) (queue.PublishOptions, string, error) {
	var o queue.PublishOptions
	if err := o.Apply(opts...); err != nil {
		return o, "", err
	}
	switch {
	case n < 0 && o.DedupIDs != nil:
		return o, "", backend.Invalid("WithDedupIDs: only for PublishBatch; Publish takes WithDedupID")
	case n >= 0 && o.DedupID != "":
		return o, "", backend.Invalid("WithDedupID: one ID cannot name many messages; PublishBatch takes WithDedupIDs")
	case n >= 0 && o.DedupIDs != nil && len(o.DedupIDs) != n:
		return o, "", backend.Invalid("WithDedupIDs: %d ids for %d payloads", len(o.DedupIDs), n)
	}
	if err := p.CheckPublish(topic, o); err != nil {
		return o, "", err
	}
	if err := ctx.Err(); err != nil {
		return o, "", err
	}
	u, err := p.url(ctx, topic)
	return o, u, err
}

// Publish sends payload to topic's queue (SendMessage) and returns the
// message as a Subscription will see it: its ID is SQS's MessageId, Topic
// the queue's name, PublishedAt the publisher's clock's now. On a FIFO
// queue a publish whose dedup ID SQS has seen within its 5-minute window
// is accepted and not stored again: the Message returned has the first
// one's ID, which SQS returns.
func (p *Publisher[T]) Publish(ctx context.Context, topic string, payload T, opts ...queue.PublishOption) (queue.Message[T], error) {
	o, url, err := p.setup(ctx, topic, opts, -1)
	if err != nil {
		return queue.Message[T]{}, err
	}
	e, msg, err := p.entry(topic, payload, &o, o.DedupID, 0)
	if err != nil {
		return queue.Message[T]{}, err
	}
	out, err := p.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: e.MessageBody, DelaySeconds: e.DelaySeconds,
		MessageAttributes: e.MessageAttributes, MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId,
	})
	if err != nil {
		return queue.Message[T]{}, queueError(url, "publish", err)
	}
	msg.ID = messageID(url, aws.ToString(out.MessageId))
	return msg, nil
}

// PublishBatch sends payloads to topic's queue in order, ten to a
// SendMessageBatch (SQS's limit; fewer when ten would pass its 1 MiB a
// request), one request after another so that a FIFO group keeps the
// order given, with the same options for each (queue.WithDedupIDs gives
// each its dedup ID). It returns the messages as Publish does; an entry
// SQS refused, or left unanswered, has the zero Message in its place, and
// its error (naming the entry) is joined in the error returned. On a FIFO
// queue a batch resent with the same dedup IDs is stored once. An empty
// batch returns nil.
func (p *Publisher[T]) PublishBatch(ctx context.Context, topic string, payloads []T, opts ...queue.PublishOption) ([]queue.Message[T], error) {
	o, url, err := p.setup(ctx, topic, opts, len(payloads))
	if err != nil {
		return nil, err
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(payloads))
	sizes := make([]int, len(payloads))
	out := make([]queue.Message[T], len(payloads))
	for i, payload := range payloads {
		var dedup string
		if o.DedupIDs != nil {
			dedup = o.DedupIDs[i]
		}
		if entries[i], out[i], err = p.entry(topic, payload, &o, dedup, i); err != nil {
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
		res, err := p.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries[lo:hi]})
		if err != nil {
			for i := lo; i < len(entries); i++ {
				out[i] = queue.Message[T]{}
			}
			return out, errors.Join(append(errs, fmt.Errorf("payloads %d to %d not sent: %w", lo, len(entries)-1, queueError(url, "publish", err)))...)
		}
		answered := make([]bool, hi-lo)
		for _, ok := range res.Successful {
			if i, in := entryIndex(ok.Id, lo, hi); in {
				answered[i-lo] = true
				out[i].ID = messageID(url, aws.ToString(ok.MessageId))
			}
		}
		for _, f := range res.Failed {
			if i, in := entryIndex(f.Id, lo, hi); in {
				answered[i-lo] = true
				out[i] = queue.Message[T]{}
				errs = append(errs, fmt.Errorf("sqsleasebus: publish to %s, payload %d: %s: %s", url, i, aws.ToString(f.Code), aws.ToString(f.Message)))
			}
		}
		for k, ok := range answered {
			if !ok {
				out[lo+k] = queue.Message[T]{}
				errs = append(errs, fmt.Errorf("sqsleasebus: publish to %s, payload %d: SendMessageBatch did not answer it", url, lo+k))
			}
		}
		lo = hi
	}
	return out, errors.Join(errs...)
}

// attrName is what SQS accepts as a message attribute's name.
var attrName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// entry builds the batch entry (Id i) of payload to topic, and the
// message as it will be read.
func (p *Publisher[T]) entry(topic string, payload T, o *queue.PublishOptions, dedup string, i int) (types.SendMessageBatchRequestEntry, queue.Message[T], error) {
	body, err := p.codec.Encode(nil, payload)
	if err != nil {
		return types.SendMessageBatchRequestEntry{}, queue.Message[T]{}, fmt.Errorf("sqsleasebus: encode: %w", err)
	}
	e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))}
	if o.Delay > 0 {
		e.DelaySeconds = secs(o.Delay)
	}
	if strings.HasSuffix(topic, ".fifo") {
		group := o.Key
		if group == "" {
			group = unkeyed + uuid.NewString() // a group of its own
		}
		e.MessageGroupId = aws.String(group)
		if dedup == "" {
			dedup = uuid.NewString() // none given: this publish is its own
		}
		e.MessageDeduplicationId = aws.String(dedup)
	}
	if len(o.Headers) > 0 {
		e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(o.Headers))
		for k, v := range o.Headers {
			e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	if n := entrySize(e); n > maxMessageSize {
		return e, queue.Message[T]{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	msg := queue.Message[T]{Topic: topic, Key: o.Key, Payload: payload, PublishedAt: p.clk.Now()}
	if len(o.Headers) > 0 {
		msg.Headers = queue.NewHeaders(o.Headers)
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
