package sqsserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
)

const (
	contentType = "application/x-amz-json-1.0"
	targetSQS   = "AmazonSQS."
	subName     = "sqs"           // the one subscription of each queue's topic
	maxBody     = 8 << 20         // a request's body: a batch of 1 MiB in JSON (control characters escaped) or form-encoded fits
	maxQueued   = math.MaxInt32   // SQS queues are unbounded; leasebus wants a bound
	seqBlock    = 1 << 20         // sequence numbers reserved per write of the state file
	stateFile   = "queues.json"   // a durable server's queues, in its directory
	journalDir  = "journal"       // a durable server's broker, in its directory
	defaultVis  = 30              // VisibilityTimeout's default, seconds
	arnPrefix   = "arn:aws:sqs:"  // of every queue ARN
	dedupWindow = 5 * time.Minute // SQS FIFO's deduplication interval
	dedupLimit  = 100_000         // deduplication IDs remembered per FIFO queue inside the window
)

// Server serves the SQS JSON protocol over a leasebus broker. It is an
// http.Handler: every SQS request is POST / with X-Amz-Target
// AmazonSQS.<Action>; paths under /leasebus/ are the control endpoint (see
// the package doc). It is safe for concurrent use. Close it when done.
type Server struct {
	cfg   config
	clock clock.Clock
	mock  *clock.Mock // the clock, when it is a mock the control endpoint may move
	b     *broker.Broker[message]
	key   []byte
	seq   atomic.Uint64 // the last FIFO sequence number handed out
	// seqFloor: on a durable server, the sequence numbers below it are
	// reserved in the state file. Written under mu.
	seqFloor atomic.Uint64

	mu     sync.RWMutex // guards everything below, and the state file
	queues map[string]*sqsQueue
	topics map[string]*snsTopic // SNS topics by name
	subs   map[string]*snsSub   // SNS subscriptions by ARN
	// stopped is closed by Close: move tasks' wake-ups end.
	stopped chan struct{}
	taskMu  sync.Mutex   // guards tasks and their entries; taken before a queue's locks, never under mu
	tasks   []*moveTask  // newest last
	running atomic.Int64 // tasks RUNNING, with a wake-up goroutine
	// console serves /leasebus/console/ (WithConsole); nil: none. Set
	// once, before the server serves.
	console http.Handler
	closed  bool
}

// New starts a server: in memory, or durable with WithDir (which brings
// back the queues and messages a server left in the directory).
func New(opts ...Option) (*Server, error) {
	cfg := config{clock: clock.New(), region: "us-east-1", account: "000000000000"}
	for _, o := range opts {
		if o.apply == nil {
			return nil, errors.New("sqsserver: the zero Option: make options with the With functions")
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.syncSet && cfg.dir == "" {
		return nil, fmt.Errorf("sqsserver: WithSync needs WithDir")
	}
	s := &Server{cfg: cfg, clock: cfg.clock, queues: make(map[string]*sqsQueue),
		topics: make(map[string]*snsTopic), subs: make(map[string]*snsSub), stopped: make(chan struct{})}
	s.mock, _ = cfg.clock.(*clock.Mock)
	bopts := []broker.Option{
		broker.WithClock(cfg.clock),
		broker.WithSubscriptionDefaults(
			broker.WithMaxAttempts(queue.UnlimitedAttempts), // maxReceiveCount is the server's (RedrivePolicy)
			broker.WithMaxQueue(maxQueued),
			broker.WithOverflow(queue.OverflowReject),
		),
		broker.WithDeadLetterLimit(1), // only messages past their retention die, and nobody reads them
		broker.WithDedupWindow(dedupWindow),
		broker.WithDedupLimit(dedupLimit),
	}
	if cfg.dir == "" {
		b, err := broker.New[message](bopts...)
		if err != nil {
			return nil, err
		}
		s.b = b
		if s.key = cfg.key; s.key == nil {
			s.key = randomBytes(32)
		}
		if err := s.mountConsole(); err != nil {
			b.Close()
			return nil, err
		}
		return s, nil
	}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("sqsserver: %w", err)
	}
	if cfg.syncSet {
		bopts = append(bopts, broker.WithSync(cfg.sync))
	}
	b, err := broker.Open(filepath.Join(cfg.dir, journalDir), queue.JSONCodec[message](), bopts...)
	if err != nil {
		return nil, fmt.Errorf("sqsserver: open %s: %w", cfg.dir, err)
	}
	s.b = b
	if err := s.restore(); err != nil {
		b.Close()
		return nil, err
	}
	if err := s.mountConsole(); err != nil {
		b.Close()
		return nil, err
	}
	return s, nil
}

// mountConsole makes WithConsole's console, if asked for.
func (s *Server) mountConsole() error {
	if s.cfg.console == nil {
		return nil
	}
	c, err := console.New(s.b, append(s.cfg.console, console.WithPrefix(consolePrefix))...)
	if err != nil {
		return fmt.Errorf("sqsserver: WithConsole: %w", err)
	}
	s.console = c
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		<-s.stopped // Close
		stop()
	}()
	go c.Record(ctx) // the console's history, until Close
	return nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// Close stops the server: every long poll ends, and it and every later
// request are answered with ServiceUnavailable. A durable server's directory keeps its
// queues and messages. Close twice is safe.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stopped)
	return s.b.Close()
}

// Clock returns the server's clock.
func (s *Server) Clock() clock.Clock { return s.clock }

// AwaitParked blocks until at least n ReceiveMessage calls on the named
// queue are long-polling with their wake-up armed on the clock, so that a
// test that moves a mock clock, or sends, knows whom it wakes. It returns
// ctx's error if ctx ends first, and QueueDoesNotExist for a missing queue.
func (s *Server) AwaitParked(ctx context.Context, queueName string, n int) error {
	q, err := s.queue(queueName)
	if err != nil {
		return err
	}
	return q.sub.AwaitParked(ctx, n)
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/leasebus/") {
		s.serveControl(w, r)
		return
	}
	reqID := uuid.NewString()
	s.logged(w, r, reqID, func(w http.ResponseWriter) {
		if r.Header.Get("X-Amz-Target") == "" {
			s.serveQuery(w, r, reqID)
		} else {
			s.serveJSON(w, r, reqID)
		}
	})
}

// serveJSON serves a request of SQS's JSON protocol.
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request, reqID string) {
	target := r.Header.Get("X-Amz-Target")
	if r.Method != http.MethodPost {
		kInvalidAction.new("SQS requests are POST, not %s.", r.Method).write(w, reqID)
		return
	}
	action, ok := strings.CutPrefix(target, targetSQS)
	noteAction(w, "json", action)
	h, found := handlers[action]
	if !ok || !found {
		kInvalidAction.new("The action %q is not valid for this endpoint.", target).write(w, reqID)
		return
	}
	rc := &request{s: s, r: r, sender: s.cfg.account}
	if err := s.authenticate(rc); err != nil {
		err.write(w, reqID)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		kInvalidParameterValue.new("The request body could not be read (at most %d bytes): %v", maxBody, err).write(w, reqID)
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	s.advanceTasks()
	out, err := h.run(rc, body)
	if err != nil {
		asError(err).write(w, reqID)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Amzn-RequestId", reqID)
	writeJSON(w, out)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a write error means the client is gone
}

// request is one SQS call being served.
type request struct {
	s      *Server
	r      *http.Request
	sender string // SenderId: the access key the request was signed with
}

func (rc *request) ctx() context.Context { return rc.r.Context() }

// storeCtx is the context a send stores its messages with: the request's
// without its end, so that a send the server has read is stored whole
// even when its client goes away or the server shuts down meanwhile (a
// publish with a done context stores nothing). A queue never blocks a
// send (its overflow policy refuses), so nothing waits on it.
func (rc *request) storeCtx() context.Context { return context.WithoutCancel(rc.r.Context()) }

// baseURL is the scheme and host of the queue URLs this request gets.
func (rc *request) baseURL() string {
	if rc.s.cfg.baseURL != "" {
		return rc.s.cfg.baseURL
	}
	scheme := "http"
	if rc.r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + rc.r.Host
}

func (rc *request) queueURL(name string) string {
	return rc.baseURL() + "/" + rc.s.cfg.account + "/" + name
}

// authenticate reads the access key of a SigV4 Authorization header (the
// SenderId of what the request sends) and, with WithAccessKeys, checks it.
func (s *Server) authenticate(rc *request) *Error {
	auth := rc.r.Header.Get("Authorization")
	key := ""
	if _, cred, ok := strings.Cut(auth, "Credential="); ok {
		key, _, _ = strings.Cut(cred, "/")
	}
	if key != "" {
		rc.sender = key
	}
	if s.cfg.accessKeys == nil {
		return nil
	}
	switch {
	case key == "":
		return kMissingAuth.new("Request is missing Authentication Token")
	case !s.cfg.accessKeys[key]:
		return kInvalidClientTokenID.new("The security token included in the request is invalid.")
	}
	return nil
}

// handler serves one action: run decodes body (the action's input, as
// JSON) and returns the response, and in is the input's type, which the
// query protocol's form is read into (nil: the action takes none). Both
// protocols call the same run.
type handler struct {
	run func(rc *request, body []byte) (any, error)
	// call runs the action on its input already decoded (a *In, of type
	// in), as the query protocol reads it; nil for an unsupported one.
	call func(rc *request, in any) (any, error)
	in   reflect.Type
}

// handlers maps each action to its handler; an action missing here is
// InvalidAction. It is never written.
var handlers = map[string]handler{
	"CreateQueue":                  decode(createQueue),
	"GetQueueUrl":                  decode(getQueueURL),
	"ListQueues":                   decode(listQueues),
	"DeleteQueue":                  decode(deleteQueue),
	"GetQueueAttributes":           decode(getQueueAttributes),
	"SetQueueAttributes":           decode(setQueueAttributes),
	"PurgeQueue":                   decode(purgeQueue),
	"TagQueue":                     decode(tagQueue),
	"UntagQueue":                   decode(untagQueue),
	"ListQueueTags":                decode(listQueueTags),
	"ListDeadLetterSourceQueues":   decode(listDeadLetterSourceQueues),
	"SendMessage":                  decode(sendMessage),
	"SendMessageBatch":             decode(sendMessageBatch),
	"ReceiveMessage":               decode(receiveMessage),
	"DeleteMessage":                decode(deleteMessage),
	"DeleteMessageBatch":           decode(deleteMessageBatch),
	"ChangeMessageVisibility":      decode(changeMessageVisibility),
	"ChangeMessageVisibilityBatch": decode(changeMessageVisibilityBatch),
	"StartMessageMoveTask":         decode(startMessageMoveTask),
	"ListMessageMoveTasks":         decode(listMessageMoveTasks),
	"CancelMessageMoveTask":        decode(cancelMessageMoveTask),
	"AddPermission":                unsupported("AddPermission"),
	"RemovePermission":             unsupported("RemovePermission"),
}

// decode makes a handler of a function of the action's input type.
func decode[In any](f func(rc *request, in *In) (any, error)) handler {
	return handler{
		run: func(rc *request, body []byte) (any, error) {
			in := new(In)
			if err := json.Unmarshal(body, in); err != nil {
				return nil, kSerialization.new("The request body is not the JSON this action takes: %v", err)
			}
			return f(rc, in)
		},
		call: func(rc *request, in any) (any, error) { return f(rc, in.(*In)) },
		in:   reflect.TypeFor[In](),
	}
}

func unsupported(action string) handler {
	return handler{run: func(*request, []byte) (any, error) {
		return nil, kUnsupportedOperation.new("%s is not supported by leasebus-sqs: set the queue's Policy attribute instead (it is stored, not enforced).", action)
	}}
}

// brokerError maps an error of the broker: a closed server is
// ServiceUnavailable, a closed queue (deleted) QueueDoesNotExist, anything
// else an InternalError.
func (s *Server) brokerError(err error) error {
	if errors.Is(err, queue.ErrClosed) {
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			return kUnavailable.new("The server is closed.")
		}
		return kQueueDoesNotExist.new("The specified queue does not exist (it was deleted).")
	}
	return kInternal.new("%v", err)
}
