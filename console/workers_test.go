package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func TestWorkersPageShowsRunningHandlers(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "orders", "ship")
	reg := poller.NewRegistry()
	started := make(chan string, 2)
	release := make(chan struct{})
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		started <- d.Payload
		<-release
		return nil
	}, poller.WithClock(mock), poller.WithWorkers(3), poller.WithRegistry(reg, "shipper"))
	require.NoError(t, err)
	srv := serve(t, b, console.WithWorkers(reg))

	var v console.WorkersView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/workers", &v))
	assert.Empty(t, v.Pools, "no pool runs yet")
	_, body := get(t, srv.URL+"/workers")
	assert.Contains(t, body, `id="no-pools"`)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	m1, err := b.Publish(ctx, "orders", "first")
	require.NoError(t, err)
	require.Equal(t, "first", <-started)
	mock.Add(90 * time.Second)
	_, err = b.Publish(ctx, "orders", "second")
	require.NoError(t, err)
	require.Equal(t, "second", <-started)

	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/workers", &v))
	require.Len(t, v.Pools, 1)
	pool := v.Pools[0]
	assert.Equal(t, "shipper", pool.Name)
	assert.Equal(t, 3, pool.Workers)
	assert.Equal(t, 2, pool.Busy)
	require.Len(t, pool.Handlers, 2)
	assert.Equal(t, m1.ID.String(), pool.Handlers[0].MessageID, "the longest-running first")
	assert.True(t, pool.Handlers[0].Oldest)
	assert.False(t, pool.Handlers[1].Oldest)
	assert.Equal(t, 90.0, pool.Handlers[0].Seconds)
	assert.Equal(t, 0.0, pool.Handlers[1].Seconds)
	assert.Equal(t, 90.0, pool.OldestSeconds)

	_, body = get(t, srv.URL+"/workers")
	assert.Contains(t, body, `data-pool="shipper"`)
	assert.Contains(t, body, `<tr data-message="`+m1.ID.String()+`" class="oldest"`)
	assert.Contains(t, body, "2 / 3")
	_, overview := get(t, srv.URL+"/")
	assert.Contains(t, overview, `href="/workers"`, "the nav links the page")

	close(release)
	cancel()
	require.NoError(t, <-done)
	done <- nil
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/workers", &v))
	assert.Empty(t, v.Pools, "a pool leaves when its Run returns")
}

func TestWorkersNeedWithWorkers(t *testing.T) {
	b, _ := brokertest.New[string](t)
	srv := serve(t, b)
	status, _ := get(t, srv.URL+"/workers")
	assert.Equal(t, http.StatusNotFound, status)
	_, overview := get(t, srv.URL+"/")
	assert.NotContains(t, overview, `href="/workers"`)
	_, err := console.New(b, console.WithWorkers(nil))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}

// A batch handler's messages show on the Workers page, each marked with
// its call's size.
func TestWorkersPageShowsBatches(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "rows", "warehouse")
	reg := poller.NewRegistry()
	started, release := make(chan struct{}, 1), make(chan struct{})
	p, err := poller.NewBatch(sub, func(ctx context.Context, ds []queue.Delivery[string]) ([]error, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	}, poller.WithClock(mock), poller.WithBatchMax(2, time.Hour), poller.WithRegistry(reg, "bulk-insert"))
	require.NoError(t, err)
	srv := serve(t, b, console.WithWorkers(reg))
	brokertest.Publish(t, b, "rows", "r1", "r2")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-started
	defer close(release)

	status, page := get(t, srv.URL+"/workers")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "in a batch of 2")
	var v console.WorkersView
	getJSON(t, srv.URL+"/api/workers", &v)
	require.Len(t, v.Pools, 1)
	require.Len(t, v.Pools[0].Handlers, 2)
	for _, h := range v.Pools[0].Handlers {
		assert.Equal(t, 2, h.Batch)
	}
}
