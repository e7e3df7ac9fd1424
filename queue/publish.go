package queue

import (
	"maps"
	"strconv"
	"time"
)

// MaxDedupID is the longest publish dedup ID, in bytes, any backend takes
// (SQS FIFO takes 128 characters; a backend with a lower limit says so in
// its CheckPublish).
const MaxDedupID = 1024

// PublishOptions is what a publish carries besides its topic and payload:
// the one shape of a publish that every backend reads, made from the
// PublishOption values a caller passes (Apply). A backend that cannot
// carry a field that is set refuses the publish by name, with an error
// matching errors.ErrUnsupported, and publishes nothing. The zero value
// is a plain publish.
type PublishOptions struct {
	Key      string            // ordering key; "" for none (WithKey)
	Priority Priority          // PriorityNormal unless set (WithPriority)
	Headers  map[string]string // the callers' maps, merged; read only (WithHeaders)
	Delay    time.Duration     // visible this long after the publish; >= 0 (WithDelay)
	TTL      time.Duration     // dead-lettered if not acked this long after the publish; 0: none (WithTTL)
	DedupID  string            // a publish of one message (WithDedupID)
	DedupIDs []string          // a batch's, one per payload, read during the call only (WithDedupIDs)
}

// PublishOption is one option of a publish. It is a small value, not a
// closure, so options cost a publish no allocation; make it with the With
// functions of this package (or a backend's, which return these). The
// zero PublishOption is invalid.
type PublishOption struct {
	kind     publishKind
	priority Priority
	dur      time.Duration // the delay, or the TTL
	headers  map[string]string
	text     string   // the key, or the dedup ID
	texts    []string // the dedup IDs of a batch
}

type publishKind uint8

const (
	_ publishKind = iota
	optPriority
	optHeaders
	optDelay
	optKey
	optTTL
	optDedup
	optDedupIDs
)

// Apply sets what opts say, in order, on o, validating each: an invalid
// option is an error matching ErrInvalidArgument that names it, and o is
// then partly set. It never writes a caller's map or slice.
func (o *PublishOptions) Apply(opts ...PublishOption) error {
	for _, opt := range opts {
		if err := o.apply(opt); err != nil {
			return err
		}
	}
	return nil
}

func (o *PublishOptions) apply(opt PublishOption) error {
	switch opt.kind {
	case optPriority:
		if opt.priority < PriorityLow || opt.priority > PriorityCritical {
			return invalid("WithPriority: %v, must be queue.PriorityLow..queue.PriorityCritical", opt.priority)
		}
		o.Priority = opt.priority
	case optHeaders:
		o.addHeaders(opt.headers)
	case optDelay:
		if opt.dur < 0 {
			return invalid("WithDelay: %v, must be >= 0", opt.dur)
		}
		o.Delay = opt.dur
	case optKey:
		o.Key = opt.text
	case optTTL:
		if opt.dur <= 0 {
			return invalid("WithTTL: %v, must be > 0", opt.dur)
		}
		o.TTL = opt.dur
	case optDedup:
		if err := dedupIDError(opt.text); err != "" {
			return invalid("WithDedupID: %s", err)
		}
		o.DedupID = opt.text
	case optDedupIDs:
		for i, id := range opt.texts {
			if err := dedupIDError(id); err != "" {
				return invalid("WithDedupIDs: id %d: %s", i, err)
			}
		}
		o.DedupIDs = opt.texts
	default:
		return invalid("zero PublishOption: make options with the With functions")
	}
	return nil
}

// Validate returns nil if o is what Apply could make (a priority in
// range, a delay >= 0, a TTL >= 0, dedup IDs not empty and at most
// MaxDedupID bytes), or else an error matching ErrInvalidArgument that
// names the field: for options made by hand, as a relay makes them from a
// row.
func (o PublishOptions) Validate() error {
	switch {
	case o.Priority < PriorityLow || o.Priority > PriorityCritical:
		return invalid("Priority %v, must be queue.PriorityLow..queue.PriorityCritical", o.Priority)
	case o.Delay < 0:
		return invalid("Delay %v, must be >= 0", o.Delay)
	case o.TTL < 0:
		return invalid("TTL %v, must be >= 0", o.TTL)
	}
	if o.DedupID != "" {
		if err := dedupIDError(o.DedupID); err != "" {
			return invalid("DedupID: %s", err)
		}
	}
	for i, id := range o.DedupIDs {
		if err := dedupIDError(id); err != "" {
			return invalid("DedupIDs: id %d: %s", i, err)
		}
	}
	return nil
}

// dedupIDError says what is wrong with a dedup ID, or "" if nothing is.
func dedupIDError(id string) string {
	switch {
	case id == "":
		return "empty id"
	case len(id) > MaxDedupID:
		return "id of " + strconv.Itoa(len(id)) + " bytes, at most " + strconv.Itoa(MaxDedupID)
	}
	return ""
}

// addHeaders adds h to the headers: a second WithHeaders adds its pairs
// (replacing a key's value) rather than replacing the first. The caller's
// maps are never written: two are merged into a new one.
func (o *PublishOptions) addHeaders(h map[string]string) {
	switch {
	case len(h) == 0:
	case len(o.Headers) == 0:
		o.Headers = h // NewHeaders copies it at publish
	default:
		merged := make(map[string]string, len(o.Headers)+len(h))
		maps.Copy(merged, o.Headers)
		maps.Copy(merged, h)
		o.Headers = merged
	}
}

// Options returns the PublishOptions that make o, for a publish of one
// message (DedupIDs is left out): what a relay or a forwarder passes on.
func (o PublishOptions) Options() []PublishOption {
	opts := make([]PublishOption, 0, 6)
	if o.Key != "" {
		opts = append(opts, WithKey(o.Key))
	}
	if o.Priority != PriorityNormal {
		opts = append(opts, WithPriority(o.Priority))
	}
	if len(o.Headers) > 0 {
		opts = append(opts, WithHeaders(o.Headers))
	}
	if o.Delay > 0 {
		opts = append(opts, WithDelay(o.Delay))
	}
	if o.TTL > 0 {
		opts = append(opts, WithTTL(o.TTL))
	}
	if o.DedupID != "" {
		opts = append(opts, WithDedupID(o.DedupID))
	}
	return opts
}

// WithPriority sets the message's priority (default PriorityNormal).
// Higher priorities are delivered first; within one, publish order.
func WithPriority(p Priority) PublishOption {
	return PublishOption{kind: optPriority, priority: p}
}

// WithHeaders sets the message's headers, copied: later changes to h do
// not show, and consumers can only read them. Several WithHeaders add up,
// a later one's value winning for a key they share (so a middleware can
// add a trace context to a caller's headers).
func WithHeaders(h map[string]string) PublishOption {
	return PublishOption{kind: optHeaders, headers: h}
}

// WithDelay makes the message visible d after publish (default 0: at
// once). d must be >= 0; a backend may take less (SQS: 15 minutes).
func WithDelay(d time.Duration) PublishOption {
	return PublishOption{kind: optDelay, dur: d}
}

// WithKey sets the message's ordering key (SQS FIFO message group). On
// each subscription, messages with the same key are delivered in publish
// order and one at a time: while one is leased or waiting out a retry
// delay, the later ones are held back; other keys flow freely. A
// dead-lettered message lets its key go on. "" means no key.
func WithKey(key string) PublishOption {
	return PublishOption{kind: optKey, text: key}
}

// WithTTL gives the message a time to live from publish: a message not
// acked by PublishedAt + d is dead-lettered with reason ReasonExpired
// instead of being delivered (one in flight may still be acked, and
// expires if it comes back). d must be > 0.
func WithTTL(d time.Duration) PublishOption {
	return PublishOption{kind: optTTL, dur: d}
}

// WithDedupID makes the publish idempotent (SQS FIFO deduplication ID,
// JetStream Nats-Msg-Id): a second publish with the same id to the same
// topic within the backend's dedup window, from the first publish, is
// accepted and stores nothing. id must not be empty, and at most
// MaxDedupID bytes long.
func WithDedupID(id string) PublishOption {
	return PublishOption{kind: optDedup, text: id}
}

// WithDedupIDs gives each message of a batch its dedup ID, as WithDedupID
// gives one to a publish: ids[i] is the ID of payloads[i]. Each must be
// valid for WithDedupID, and the batch must have one per payload. The
// slice is read during the call only. A publish of one message refuses
// this option.
func WithDedupIDs(ids []string) PublishOption {
	return PublishOption{kind: optDedupIDs, texts: ids}
}
