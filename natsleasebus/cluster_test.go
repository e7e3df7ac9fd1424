package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// cluster is three embedded servers with JetStream, routed to each other
// on localhost, each with a store of its own. A node can be stopped and
// started again on the same ports and store.
type cluster struct {
	tb    testing.TB
	mu    sync.Mutex // guards nodes
	nodes []*server.Server
	opts  []*server.Options
}

// freePorts returns n ports free now on localhost.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	ports := freePorts(tb, 6)
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	c := &cluster{tb: tb}
	for i := range 3 {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: ports[i],
			JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "leasebus", Host: "127.0.0.1", Port: ports[3+i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		c.nodes = append(c.nodes, nil)
	}
	for i := range 3 {
		c.start(i)
	}
	tb.Cleanup(func() {
		for i := range 3 {
			c.stop(i)
		}
	})
	return c
}

func (c *cluster) start(i int) {
	c.tb.Helper()
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.tb.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(hangGuard) {
		c.tb.Fatalf("node %d not ready", i)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

func (c *cluster) stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// index returns the node named name.
func (c *cluster) index(tb testing.TB, name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	tb.Fatalf("no node named %q", name)
	return -1
}

func (c *cluster) urls() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// eventually retries f every 50ms until it succeeds or ctx ends.
func eventually(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// keepsReplicas checks that a reopen never changes replicas unasked: a second
// Open and Subscribe with no options leave the 3 replicas of the streams
// and the consumer as they are, and one asking for 1 is refused.
func keepsReplicas(ctx context.Context, t *testing.T, nc *nats.Conn, bus *natsleasebus.Bus) {
	t.Helper()
	again, err := natsleasebus.Open(ctx, nc)
	if err != nil {
		t.Fatalf("second Open with no options: %v", err)
	}
	other, err := natsleasebus.Subscribe[string](ctx, again, "orders", "workers")
	if err != nil {
		t.Fatalf("second Subscribe with no options: %v", err)
	}
	other.Close()
	for _, name := range []string{defaultStream, defaultStream + "_DLQ"} {
		st, err := bus.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s: %d replicas after a second Open, want 3", name, r)
		}
	}
	info, err := other.Consumer().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("consumer after a second Subscribe: cluster %+v, want a leader and 2 replicas", info.Cluster)
	}
	_, err = natsleasebus.Open(ctx, nc, natsleasebus.WithReplicas(1))
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Diffs[0].Setting != "Replicas" {
		t.Errorf("Open asking for 1 replica: %v", err)
	}
}

// TestClusterFailover runs an 8-worker pool on a 3-node cluster (stream,
// dead letters and consumer with 3 replicas, which a second Open and
// Subscribe keep) and, while it works, stops
// the stream's leader, starts it again, then stops the consumer's leader
// and starts it again. Every message must end acked (none lost, the
// stream empty at the end), and a message handled twice must have had an
// Ack fail during a failover.
func TestClusterFailover(t *testing.T) {
	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t)
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var bus *natsleasebus.Bus
	if err := eventually(ctx, func() error { // until the meta leader is elected
		octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
		defer ocancel()
		bus, err = natsleasebus.Open(octx, nc, natsleasebus.WithReplicas(3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "workers",
		natsleasebus.WithVisibilityTimeout(2*time.Second), natsleasebus.WithMaxInFlight(64),
		natsleasebus.WithSettleTimeout(500*time.Millisecond), natsleasebus.WithPollSlice(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	keepsReplicas(ctx, t, nc, bus)
	for i := 0; i < n; i += 100 {
		batch := make([]string, 100)
		for j := range batch {
			batch[j] = fmt.Sprintf("m%04d", i+j)
		}
		if _, err := natsleasebus.PublishBatch(ctx, bus, "orders", batch); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu        sync.Mutex
		handled   = map[string]int{}
		confirmed = map[string]int{}
		ackFailed = map[string]int{}
	)
	progress := make(chan struct{}, 1)
	p, err := poller.New(sub, func(_ context.Context, d queue.Delivery[string]) error {
		mu.Lock()
		handled[d.Payload]++
		mu.Unlock()
		return nil
	}, poller.WithWorkers(8), poller.WithBatch(8),
		poller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		poller.WithObserver(func(ev poller.Event[string]) {
			switch {
			case ev.Outcome == poller.OutcomeAcked:
				mu.Lock()
				confirmed[ev.Delivery.Payload]++
				mu.Unlock()
			case ev.Outcome == poller.OutcomeSettleFailed && ev.Err == nil: // a handler that succeeded, its Ack refused
				mu.Lock()
				ackFailed[ev.Delivery.Payload]++
				mu.Unlock()
			default:
				return
			}
			select {
			case progress <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(confirmed)
	}
	waitAcked := func(k int) {
		t.Helper()
		for acked() < k {
			select {
			case <-progress:
			case <-ctx.Done():
				t.Fatalf("stuck at %d of %d acked", acked(), k)
			}
		}
	}
	leader := func(what string, get func(context.Context) (string, error)) int {
		t.Helper()
		var name string
		if err := eventually(ctx, func() error {
			gctx, gcancel := context.WithTimeout(ctx, time.Second)
			defer gcancel()
			var err error
			name, err = get(gctx)
			if err == nil && name == "" {
				err = errors.New("no leader")
			}
			return err
		}); err != nil {
			t.Fatalf("%s leader: %v", what, err)
		}
		return c.index(t, name)
	}
	streamLeader := func(ctx context.Context) (string, error) {
		st, err := bus.JetStream().Stream(ctx, defaultStream)
		if err != nil {
			return "", err
		}
		return st.CachedInfo().Cluster.Leader, nil
	}
	consumerLeader := func(ctx context.Context) (string, error) {
		info, err := sub.Consumer().Info(ctx)
		if err != nil {
			return "", err
		}
		return info.Cluster.Leader, nil
	}

	waitAcked(n / 4)
	i := leader("stream", streamLeader)
	t.Logf("%d acked: stopping the stream leader n%d", acked(), i)
	c.stop(i)
	waitAcked(n / 2)
	c.start(i)
	j := leader("consumer", consumerLeader)
	t.Logf("%d acked: n%d back; stopping the consumer leader n%d", acked(), i, j)
	c.stop(j)
	waitAcked(3 * n / 4)
	c.start(j)
	t.Logf("%d acked: n%d back", acked(), j)

	// Until the consumer holds nothing and the stream is empty.
	if err := eventually(ctx, func() error {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		defer icancel()
		info, err := sub.Consumer().Info(ictx)
		if err != nil {
			return err
		}
		st, err := bus.JetStream().Stream(ictx, defaultStream)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || st.CachedInfo().State.Msgs != 0 {
			return fmt.Errorf("%d pending, %d ack pending, %d in the stream", info.NumPending, info.NumAckPending, st.CachedInfo().State.Msgs)
		}
		return nil
	}); err != nil {
		t.Fatalf("never drained: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	done <- nil

	mu.Lock()
	defer mu.Unlock()
	var twice, unconfirmed, failed int
	for k := range n {
		pl := fmt.Sprintf("m%04d", k)
		switch {
		case handled[pl] == 0:
			t.Errorf("%s lost: never handled", pl)
		case handled[pl] > 1 && ackFailed[pl] == 0:
			t.Errorf("%s handled %d times with no Ack failing", pl, handled[pl])
		}
		if confirmed[pl] > 1 {
			t.Errorf("%s: %d confirmed acks", pl, confirmed[pl])
		}
		if confirmed[pl] == 0 {
			unconfirmed++ // every Ack failed, yet the message is gone: one reached the server
		}
		if handled[pl] > 1 {
			twice++
		}
		failed += ackFailed[pl]
	}
	t.Logf("%d messages, 0 lost: %d handled twice, %d acks failed, %d never confirmed", n, twice, failed, unconfirmed)
}
