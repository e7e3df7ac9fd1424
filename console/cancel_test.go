package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// The Workers page cancels a running job: the form is there, the action
// ends the handler's context with a cause matching ErrCancelled, and the
// message is dead-lettered as chosen when the handler returns. The action
// is refused read-only, cross-origin, for a message no handler runs and
// for a bad choice.
func TestWorkersPageCancelsAJob(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "exports", "worker")
	reg := poller.NewRegistry()
	causes := make(chan error, 1)
	started := make(chan struct{}, 1)
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, poller.WithClock(mock), poller.WithRegistry(reg, "exports"))
	require.NoError(t, err)
	srv := serve(t, b, console.WithWorkers(reg))
	ro := serve(t, b, console.WithWorkers(reg), console.WithReadOnly())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	m, err := b.Publish(ctx, "exports", "customer-42")
	require.NoError(t, err)
	<-started

	_, page := get(t, srv.URL+"/workers")
	assert.Contains(t, page, `action="/actions/job-cancel"`)
	assert.Contains(t, page, `value="`+m.ID.String()+`"`)
	_, page = get(t, ro.URL+"/workers")
	assert.NotContains(t, page, "job-cancel", "read-only: no form")

	form := url.Values{"id": {m.ID.String()}, "as": {"dead-letter"}}
	status, _, _ := post(t, ro.URL+"/api/actions/job-cancel", form)
	assert.Equal(t, http.StatusForbidden, status, "read-only")
	status, _, _ = post(t, srv.URL+"/api/actions/job-cancel", form, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status, "cross-origin")
	status, _, _ = post(t, srv.URL+"/api/actions/job-cancel", url.Values{"id": {m.ID.String()}, "as": {"later"}})
	assert.Equal(t, http.StatusBadRequest, status, "a bad choice")
	status, _, _ = post(t, srv.URL+"/api/actions/job-cancel", url.Values{"id": {"nope"}, "as": {"retry"}})
	assert.Equal(t, http.StatusBadRequest, status, "a bad id")
	status, _, _ = post(t, srv.URL+"/api/actions/job-cancel", url.Values{"id": {uuid.NewString()}, "as": {"retry"}})
	assert.Equal(t, http.StatusNotFound, status, "no such job")
	select {
	case c := <-causes:
		t.Fatalf("cancelled by a refused action: %v", c)
	default:
	}

	status, body, hdr := post(t, srv.URL+"/actions/job-cancel", url.Values{"id": {m.ID.String()}, "as": {"dead-letter"}, "back": {"/workers"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	assert.Contains(t, hdr.Get("Location"), "Cancelled+the+job")
	require.True(t, errors.Is(<-causes, poller.ErrCancelled))
	require.NoError(t, p.AwaitQuiet(ctx))
	eventually(t, "the dead letter", func() bool { return len(b.DeadLetters()) == 1 })
	dl := b.DeadLetters()[0]
	assert.Equal(t, m.ID, dl.Message.ID)
	assert.True(t, strings.Contains(dl.LastError, "cancelled"), dl.LastError)
}

// A message's page shows the handler that runs it, and cancels it as the
// Workers page does; read-only, it shows the handler and no form; the
// copy of the message on another subscription, which no handler runs,
// has neither.
func TestMessagePageCancelsAJob(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "exports", "worker")
	brokertest.Subscribe(t, b, "exports", "archive")
	reg := poller.NewRegistry()
	started := make(chan struct{}, 1)
	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[string]) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, poller.WithClock(mock), poller.WithRegistry(reg, "exports"))
	require.NoError(t, err)
	srv := serve(t, b, console.WithWorkers(reg))
	ro := serve(t, b, console.WithWorkers(reg), console.WithReadOnly())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	m, err := b.Publish(ctx, "exports", "customer-42")
	require.NoError(t, err)
	<-started

	page := func(base, name string) string {
		status, body := get(t, base+"/message?topic=exports&name="+name+"&id="+m.ID.String())
		require.Equal(t, http.StatusOK, status, body)
		return body
	}
	body := page(srv.URL, "worker")
	assert.Contains(t, body, `in pool <a href="/workers">exports</a>`)
	assert.Contains(t, body, `id="cancel-job"`)
	body = page(ro.URL, "worker")
	assert.Contains(t, body, `in pool <a href="/workers">exports</a>`)
	assert.NotContains(t, body, "job-cancel", "read-only: no form")
	assert.NotContains(t, page(srv.URL, "archive"), `id="running"`, "the archive's copy, which no handler runs")

	status, body, _ := post(t, srv.URL+"/actions/job-cancel", url.Values{"id": {m.ID.String()}, "as": {"delete"}, "back": {"/message"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.NoError(t, p.AwaitQuiet(ctx))
	status, _ = get(t, srv.URL+"/message?topic=exports&name=worker&id="+m.ID.String())
	assert.Equal(t, http.StatusNotFound, status, "deleted: the subscription holds it no more")
	assert.Equal(t, uint64(1), sub.Stats().Acked)
}
