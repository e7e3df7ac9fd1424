package broker

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/core"
	"github.com/leasebus/leasebus/queue"
)

// The durable broker's journal records. Each body is a type byte, then its
// fields: unsigned integers as uvarints, signed ones (durations) as
// varints, times as stamps (see putTime), strings and byte strings with a
// uvarint length, message IDs as 16 raw bytes. Messages are keyed by
// (subscription id, message ID); a subscription id is never reused while a
// record names it.
const (
	recFormat   byte = iota // "leasebus", version: the first record of every journal
	recTopic                // name
	recDelTopic             // name: its subscriptions by name go, their dead letters stay
	recSub                  // id, topic, name, spec: created, or declared again with other options
	recUnsub                // id: its messages go, its dead letters stay
	recPut                  // sub, place, attempts, flags, visibleAt, ttl, expiresAt, lastErr, reason, deadAt, envelope
	recDeliver              // sub, count, ids: each delivered once more
	recRetry                // sub, id, visibleAt, lastErr: waits again after a failed attempt
	recRelease              // sub, id: visible again, attempt given back
	recRemove               // sub, id: acked or dropped
	recDead                 // sub, id, reason, attempts, lastErr, at
	recForget               // sub, id: a dead letter left the store (dropped, routed, redriven elsewhere)
	recPurge                // sub: every message it holds goes
	recDedup                // topic, dedup ID, envelope: a remembered ID (formats 1 and 2; read, no longer written)
	recDedupRef             // topic, dedup ID, message ID: recDedup whose envelope is that of a put before it (format 2; read, no longer written)
	recDiscard              // count, then (sub, id) each: dead letters discarded, all at once (version 3)
	recGroup                // count, then each record with its length: one operation's records, all or none (version 3)
	recPutRef               // recPut whose envelope is that of a put before it in its group: the message ID instead (version 3)
	recDedupID              // topic, dedup ID, message ID, first publish: what a remembered ID keeps (version 3)
	recPause                // sub, paused (1) or resumed (0) (version 4)
	recHistory              // sub, id, count, then each attempt: attempt, outcome, at, held, error: a dead letter's history (version 6)
)

// The journal's format: written first in every journal and snapshot, and
// checked first by Open, so that a journal of another format (a later
// version's, or not leasebus's) fails to open instead of being misread.
const (
	formatMagic   = "leasebus"
	formatVersion = 6 // 2 added recDedupRef; 3 recDiscard, recGroup, recPutRef and recDedupID; 4 recPause; 5 a recSub's flow control; 6 recHistory; Open reads 1 to 5 too
)

// Flags of a recPut.
const (
	putInFlight byte = 1 << iota
	putDead
)

var errShort = errors.New("record too short")

type enc struct{ b []byte }

func (e *enc) byte(v byte)                       { e.b = append(e.b, v) }
func (e *enc) uint(v uint64)                     { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) int(v int64)                       { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)                      { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) id(id uuid.UUID)                   { e.b = append(e.b, id[:]...) }
func (e *enc) dur(d time.Duration)               { e.int(int64(d)) }
func (e *enc) float(f float64)                   { e.uint(math.Float64bits(f)) }
func (e *enc) time(t time.Time)                  { e.int(stamp(t)) }
func (e *enc) start(typ byte) *enc               { e.b = append(e.b[:0], typ); return e }
func (e *enc) sub(id uint32) *enc                { e.uint(uint64(id)); return e }
func (e *enc) key(sub uint32, id uuid.UUID) *enc { e.sub(sub).id(id); return e }

// stamp encodes a time as Unix nanoseconds, with 0 kept for the zero
// time: a mock clock starts at the Unix epoch, which must not read back as
// "no time". A time outside what int64 nanoseconds hold (before 1678, after
// April 2262: a delay or TTL of centuries) is stored as the nearest one
// they hold, so that it reads back as about as far away, never wrapped
// around.
func stamp(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.After(maxStamp):
		return math.MaxInt64
	case t.Before(minStamp):
		return math.MinInt64
	}
	ns := t.UnixNano()
	if ns >= 0 {
		return ns + 1
	}
	return ns
}

// The times stamp can hold.
var (
	maxStamp = time.Unix(0, math.MaxInt64-1)
	minStamp = time.Unix(0, math.MinInt64)
)

func unstamp(v int64) time.Time {
	switch {
	case v == 0:
		return time.Time{}
	case v > 0:
		return time.Unix(0, v-1)
	default:
		return time.Unix(0, v)
	}
}

// dec reads a record; the first short or malformed field sets err, and
// every later read returns zero values.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() { d.err = errShort; d.b = nil }

func (d *dec) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) int() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string { return string(d.bytes()) }

// view is str without a copy: the string shares the record's bytes, so it
// is good only while they are (a replay's, until the journal's Replayed).
func (d *dec) view() string {
	b := d.bytes()
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (d *dec) id() uuid.UUID {
	var id uuid.UUID
	if len(d.b) < len(id) {
		d.fail()
		return id
	}
	copy(id[:], d.b)
	d.b = d.b[len(id):]
	return id
}

func (d *dec) sub() uint32 {
	v := d.uint()
	if v > math.MaxUint32 {
		d.fail()
	}
	return uint32(v)
}

func (d *dec) dur() time.Duration { return time.Duration(d.int()) }
func (d *dec) float() float64     { return math.Float64frombits(d.uint()) }
func (d *dec) time() time.Time    { return unstamp(d.int()) }

// rest returns what is left.
func (d *dec) rest() []byte {
	v := d.b
	d.b = nil
	return v
}

// subSpec is what a subscription's record keeps of its options: every
// queue setting but the clock and RetryPolicy.Rand, its dead-letter topic,
// and whether it had a filter (a function, which the application gives
// again when it declares the subscription after a restart).
type subSpec struct {
	visibility   time.Duration
	maxAttempts  int
	retryInitial time.Duration
	retryMax     time.Duration
	retryMult    float64
	retryJitter  float64
	noBackoff    bool
	maxQueue     int
	overflow     queue.OverflowPolicy
	maxInFlight  int
	ttl          time.Duration
	deadLetters  string
	filtered     bool
	// Since format version 5: the flow control. A record of an earlier
	// version has none of it, which is what its zero values say.
	rate           queue.Rate
	keyRate        queue.Rate
	keyConcurrency int
	fairKeys       bool
}

func specOf(c queue.Config, deadLetters string, filtered bool) subSpec {
	return subSpec{
		visibility: c.VisibilityTimeout, maxAttempts: c.MaxAttempts,
		retryInitial: c.Retry.Initial, retryMax: c.Retry.Max, retryMult: c.Retry.Multiplier,
		retryJitter: c.Retry.Jitter, noBackoff: c.Retry.NoBackoff,
		maxQueue: c.MaxQueue, overflow: c.Overflow, maxInFlight: c.MaxInFlight, ttl: c.TTL,
		deadLetters: deadLetters, filtered: filtered,
		rate: c.RateLimit, keyRate: c.KeyRateLimit, keyConcurrency: c.KeyConcurrency, fairKeys: c.FairKeys,
	}
}

func (s subSpec) config() queue.Config {
	return queue.Config{
		VisibilityTimeout: s.visibility, MaxAttempts: s.maxAttempts,
		Retry: queue.RetryPolicy{Initial: s.retryInitial, Max: s.retryMax, Multiplier: s.retryMult,
			Jitter: s.retryJitter, NoBackoff: s.noBackoff},
		MaxQueue: s.maxQueue, Overflow: s.overflow, MaxInFlight: s.maxInFlight, TTL: s.ttl,
		RateLimit: s.rate, KeyRateLimit: s.keyRate, KeyConcurrency: s.keyConcurrency, FairKeys: s.fairKeys,
	}
}

func (e *enc) spec(s subSpec) {
	e.dur(s.visibility)
	e.int(int64(s.maxAttempts))
	e.dur(s.retryInitial)
	e.dur(s.retryMax)
	e.float(s.retryMult)
	e.float(s.retryJitter)
	e.byte(b2u(s.noBackoff))
	e.int(int64(s.maxQueue))
	e.byte(byte(s.overflow))
	e.int(int64(s.maxInFlight))
	e.dur(s.ttl)
	e.str(s.deadLetters)
	e.byte(b2u(s.filtered))
	e.int(int64(s.rate.N))
	e.dur(s.rate.Per)
	e.int(int64(s.keyRate.N))
	e.dur(s.keyRate.Per)
	e.int(int64(s.keyConcurrency))
	e.byte(b2u(s.fairKeys))
}

// spec reads a subscription's options; the flow control only if the
// record goes on (a record of format version 4 or earlier ends before it).
func (d *dec) spec() subSpec {
	s := subSpec{
		visibility: d.dur(), maxAttempts: int(d.int()),
		retryInitial: d.dur(), retryMax: d.dur(), retryMult: d.float(), retryJitter: d.float(),
		noBackoff: d.byte() == 1, maxQueue: int(d.int()), overflow: queue.OverflowPolicy(d.byte()),
		maxInFlight: int(d.int()), ttl: d.dur(), deadLetters: d.str(), filtered: d.byte() == 1,
	}
	if d.err == nil && len(d.b) > 0 {
		s.rate = queue.Rate{N: int(d.int()), Per: d.dur()}
		s.keyRate = queue.Rate{N: int(d.int()), Per: d.dur()}
		s.keyConcurrency = int(d.int())
		s.fairKeys = d.byte() == 1
	}
	return s
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// envelope appends a message's envelope: ID, topic, key, priority,
// PublishedAt, headers, then the encoded payload to the end.
func envelope[T any](dst []byte, m *queue.Message[T], codec queue.Codec[T]) ([]byte, error) {
	e := enc{dst}
	e.id(m.ID)
	e.str(m.Topic)
	e.str(m.Key)
	e.byte(byte(m.Priority))
	e.time(m.PublishedAt)
	e.uint(uint64(m.Headers.Len()))
	for k, v := range m.Headers.All() {
		e.str(k)
		e.str(v)
	}
	return codec.Encode(e.b, m.Payload)
}

// envelopeHead reads what a dedup ID needs of an envelope: the message's
// ID and when it was published (no payload: no codec).
func envelopeHead(data []byte) (uuid.UUID, time.Time, error) {
	d := dec{b: data}
	id := d.id()
	d.str()  // topic
	d.str()  // key
	d.byte() // priority
	at := d.time()
	return id, at, d.err
}

// unenvelope decodes a message from its envelope with o, which gives the
// codec the payload bytes it may keep (see unpacker).
func unenvelope[T any](data []byte, codec queue.Codec[T], o *unpacker) (*queue.Message[T], error) {
	d := dec{b: data}
	m := &queue.Message[T]{ID: d.id(), Topic: o.topicOf(d.bytes()), Key: d.str(), Priority: queue.Priority(int8(d.byte())), PublishedAt: d.time()}
	n := d.uint()
	if n > uint64(len(d.b)) { // each header takes at least two bytes
		d.fail()
	}
	if n > 0 && d.err == nil {
		h := make(map[string]string, n)
		for range n {
			k := d.str()
			h[k] = d.str()
		}
		m.Headers = queue.NewHeaders(h)
	}
	if d.err != nil {
		return nil, d.err
	}
	if !core.ValidPriority(m.Priority) {
		return nil, errors.New("priority out of range")
	}
	p, err := codec.Decode(o.own(d.rest()))
	if err != nil {
		return nil, err
	}
	m.Payload = p
	return m, nil
}

// history encodes a dead letter's attempts (recHistory's body after its
// key).
func (e *enc) history(h []queue.Attempt) {
	e.uint(uint64(len(h)))
	for _, a := range h {
		e.uint(uint64(a.Attempt))
		e.byte(byte(a.Outcome))
		e.time(a.At)
		e.dur(a.Held)
		e.str(a.Error)
	}
}

// history decodes what enc.history wrote.
func (d *dec) history() []queue.Attempt {
	n := d.uint()
	if n > uint64(len(d.b))/4 { // each attempt takes at least 4 bytes
		d.fail()
		return nil
	}
	h := make([]queue.Attempt, 0, n)
	for range n {
		a := queue.Attempt{Attempt: int(d.uint()), Outcome: queue.AttemptOutcome(d.byte()), At: d.time(), Held: d.dur(), Error: d.str()}
		if d.err != nil {
			return nil
		}
		h = append(h, a)
	}
	return h
}
