package sqsserver

import (
	"encoding/base64"
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasebus/leasebus/broker"
)

// sqsQueue is one SQS queue: a leasebus topic of the same name with one
// subscription, and the attributes the server applies to it.
type sqsQueue struct {
	name string
	fifo bool
	gen  uint64 // the incarnation receipt handles name
	sub  *broker.Subscription[message]
	// sendMu orders a FIFO queue's publishes: held from taking a sequence
	// number until the broker has the message, so that within a group the
	// delivery order is the order of the sequence numbers.
	sendMu sync.Mutex

	mu       sync.Mutex // guards everything below
	attrs    map[string]string
	st       settings // parsed from attrs
	tags     map[string]string
	created  time.Time
	modified time.Time
	rcv      receives // what the server knows of the receives of its messages
}

func (q *sqsQueue) settings() settings {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.st
}

// visible is ApproximateNumberOfMessages at now: visible in the broker
// (held behind their group included), less those deleted after a reset.
func (q *sqsQueue) visible(now time.Time) int {
	st := q.sub.Stats()
	return max(st.Visible+st.HeldBack-q.deletedWaiting(now), 0)
}

func (s *Server) arn(name string) string {
	return arnPrefix + s.cfg.region + ":" + s.cfg.account + ":" + name
}

// nameOfARN returns the queue name of one of this server's queue ARNs.
func (s *Server) nameOfARN(arn string) (string, bool) {
	name, ok := strings.CutPrefix(arn, s.arn(""))
	return name, ok && name != ""
}

// queue returns the named queue, or QueueDoesNotExist.
func (s *Server) queue(name string) (*sqsQueue, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, kUnavailable.new("The server is closed.")
	}
	q := s.queues[name]
	if q == nil {
		return nil, kQueueDoesNotExist.new("The specified queue does not exist.")
	}
	return q, nil
}

// queueOf finds the queue a request's QueueUrl names: by the URL's last
// path segment, whatever its host.
func (s *Server) queueOf(url *string) (*sqsQueue, error) {
	if url == nil || *url == "" {
		return nil, kMissingParameter.new("The request must contain the parameter QueueUrl.")
	}
	u := strings.TrimRight(*url, "/")
	name := u[strings.LastIndexByte(u, '/')+1:]
	return s.queue(name)
}

func createQueue(rc *request, in *createQueueInput) (any, error) {
	s := rc.s
	if in.QueueName == nil {
		return nil, kMissingParameter.new("The request must contain the parameter QueueName.")
	}
	name := *in.QueueName
	fifo, err := validQueueName(name)
	if err != nil {
		return nil, err
	}
	if v, ok := in.Attributes["FifoQueue"]; ok {
		switch {
		case v != "true" && v != "false":
			return nil, kInvalidAttributeValue.new("Invalid value for the parameter FifoQueue: %q.", v)
		case (v == "true") != fifo:
			return nil, kInvalidParameterValue.new("The name of a FIFO queue must end with .fifo, and only a FIFO queue's name may: %q with FifoQueue=%s.", name, v)
		}
	} else if fifo {
		return nil, kInvalidParameterValue.new("The queue %q has the .fifo suffix: create it with the attribute FifoQueue=true.", name)
	}
	attrs := defaultAttributes(fifo)
	given := make(map[string]string, len(in.Attributes))
	for k, v := range in.Attributes {
		if k == "FifoQueue" {
			continue
		}
		nv, err := normalizeAttribute(k, v, fifo)
		if err != nil {
			return nil, err
		}
		given[k] = nv
	}
	if len(in.Tags) > maxTags {
		return nil, kInvalidParameterValue.new("A queue has at most %d tags.", maxTags)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, kUnavailable.new("The server is closed.")
	}
	if q := s.queues[name]; q != nil {
		q.mu.Lock()
		defer q.mu.Unlock()
		for k, v := range given {
			if q.attrs[k] != v {
				return nil, kQueueNameExists.new("A queue already exists with the same name and a different value for attribute %s.", k)
			}
		}
		return queueURLOutput{rc.queueURL(name)}, nil
	}
	if err := s.applyLocked(name, attrs, given); err != nil {
		return nil, err
	}
	if err := s.dropLeftoverLocked(name); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	q := &sqsQueue{
		name: name, fifo: fifo, gen: newGen(), attrs: attrs, st: parseSettings(attrs),
		tags: maps.Clone(in.Tags), created: now, modified: now,
	}
	s.queues[name] = q
	if err := s.saveLocked(); err != nil {
		delete(s.queues, name)
		return nil, err
	}
	if err := s.attach(q); err != nil {
		delete(s.queues, name)
		_ = s.saveLocked()
		return nil, kInternal.new("create queue %s: %v", name, err)
	}
	return queueURLOutput{rc.queueURL(name)}, nil
}

// dropLeftoverLocked deletes the broker topic of a queue name that the
// state does not list (a DeleteQueue whose topic deletion failed), so that
// a new queue of the name never adopts its messages, and, on a durable
// server, makes every journal record so far durable before the state file
// names the new queue: the state file is synced as it is written, and
// under SyncNone a power cut could otherwise leave a state that lists the
// new queue beside a journal that still holds the old one. Called with
// s.mu held, for a name with no queue.
func (s *Server) dropLeftoverLocked(name string) error {
	if slices.Contains(s.b.Topics(), name) {
		if err := s.b.DeleteTopic(name); err != nil {
			return kInternal.new("create queue %s: drop the topic a deleted queue left: %v", name, err)
		}
	}
	if err := s.b.Sync(); err != nil {
		return kInternal.new("create queue %s: %v", name, err)
	}
	return nil
}

func newGen() uint64 { return binary.BigEndian.Uint64(randomBytes(8)) }

// attach creates a queue's topic and subscription (on a durable broker,
// binds those it recovered).
func (s *Server) attach(q *sqsQueue) error {
	if err := s.b.CreateTopic(q.name); err != nil {
		return err
	}
	opts := []broker.SubscribeOption{broker.WithVisibilityTimeout(defaultVis * time.Second)}
	if !q.fifo {
		// A fair queue: a MessageGroupId on a standard queue names a tenant
		// (the message's key), and tenants take turns, with no order and
		// no bound on what is in flight within one. WithUpdate: a queue an
		// earlier version stored without them gets them.
		opts = append(opts, broker.WithFairKeys(), broker.WithKeyConcurrency(maxQueued), broker.WithUpdate())
	}
	sub, err := s.b.Subscribe(q.name, subName, opts...)
	if err != nil {
		return err
	}
	q.sub = sub
	return nil
}

func getQueueURL(rc *request, in *getQueueURLInput) (any, error) {
	if in.QueueName == nil || *in.QueueName == "" {
		return nil, kMissingParameter.new("The request must contain the parameter QueueName.")
	}
	if in.QueueOwnerAWSAccountID != "" && in.QueueOwnerAWSAccountID != rc.s.cfg.account {
		return nil, kQueueDoesNotExist.new("The specified queue does not exist (account %s is not this server's).", in.QueueOwnerAWSAccountID)
	}
	if _, err := rc.s.queue(*in.QueueName); err != nil {
		return nil, err
	}
	return queueURLOutput{rc.queueURL(*in.QueueName)}, nil
}

// page returns names after the NextToken, at most max (0: 1000 and no
// token), and the token of the next page.
func page(names []string, token string, max *int) ([]string, string, error) {
	limit := 1000
	if max != nil {
		if *max < 1 || *max > 1000 {
			return nil, "", kInvalidParameterValue.new("Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 1000.", *max)
		}
		limit = *max
	}
	slices.Sort(names)
	if token != "" {
		after, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return nil, "", kInvalidParameterValue.new("Invalid NextToken value.")
		}
		i, _ := slices.BinarySearch(names, string(after)+"\x00")
		names = names[i:]
	}
	next := ""
	if len(names) > limit {
		names = names[:limit]
		if max != nil {
			next = base64.RawURLEncoding.EncodeToString([]byte(names[limit-1]))
		}
	}
	return names, next, nil
}

func listQueues(rc *request, in *listQueuesInput) (any, error) {
	s := rc.s
	s.mu.RLock()
	var names []string
	for name := range s.queues {
		if strings.HasPrefix(name, in.QueueNamePrefix) {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	names, next, err := page(names, in.NextToken, in.MaxResults)
	if err != nil {
		return nil, err
	}
	out := listQueuesOutput{NextToken: next}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, rc.queueURL(n))
	}
	return out, nil
}

func listDeadLetterSourceQueues(rc *request, in *listDeadLetterSourceQueuesInput) (any, error) {
	s := rc.s
	dlq, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	target := s.arn(dlq.name)
	s.mu.RLock()
	var names []string
	for name, q := range s.queues {
		if p := q.settings().redrive; p != nil && p.DeadLetterTargetArn == target {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	names, next, err := page(names, in.NextToken, in.MaxResults)
	if err != nil {
		return nil, err
	}
	out := listDeadLetterSourceQueuesOutput{QueueUrls: []string{}, NextToken: next}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, rc.queueURL(n))
	}
	return out, nil
}

func deleteQueue(rc *request, in *queueInput) (any, error) {
	s := rc.s
	q, err := s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[q.name] != q {
		return nil, kQueueDoesNotExist.new("The specified queue does not exist.")
	}
	delete(s.queues, q.name)
	if err := s.saveLocked(); err != nil {
		s.queues[q.name] = q
		return nil, err
	}
	// Its receives end with QueueDoesNotExist; its messages are gone.
	if err := s.b.DeleteTopic(q.name); err != nil {
		return nil, kInternal.new("delete queue %s: %v", q.name, err)
	}
	return struct{}{}, nil
}

func purgeQueue(rc *request, in *queueInput) (any, error) {
	q, err := rc.s.queueOf(in.QueueURL)
	if err != nil {
		return nil, err
	}
	if _, err := q.sub.Purge(); err != nil {
		return nil, rc.s.brokerError(err)
	}
	q.forgetAll()
	return struct{}{}, nil
}
