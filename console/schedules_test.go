package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
	"github.com/leasebus/leasebus/schedule"
)

func TestSchedulesPageAndActions(t *testing.T) {
	b, mock := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "reports", "w")
	s, err := schedule.New(schedule.WithClock(mock))
	require.NoError(t, err)
	publish := schedule.Publish(b, "reports", func(f schedule.Fire) string { return f.DedupID })
	require.NoError(t, s.Add("hourly", schedule.Every(time.Hour), publish))
	require.NoError(t, s.Add("broken", schedule.Cron("0 3 * * *"), func(context.Context, schedule.Fire) error {
		return errors.New("the <b>report</b> store is down")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, s.AwaitQuiet(ctx))
	mock.Add(time.Hour)
	require.NoError(t, s.AwaitQuiet(ctx))
	_, err = s.Trigger(ctx, "broken")
	require.Error(t, err)

	srv := serve(t, b, console.WithSchedules(s))
	status, body := get(t, srv.URL+"/schedules")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `data-schedule="hourly"`)
	assert.Contains(t, body, `<code>0 3 * * *</code>`)
	assert.Contains(t, body, "the &lt;b&gt;report&lt;/b&gt; store is down", "an error is text, escaped")
	assert.NotContains(t, body, "<b>report</b>")
	_, overview := get(t, srv.URL+"/")
	assert.Contains(t, overview, `href="/schedules"`, "the nav links the page")

	var v console.SchedulesView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/schedules", &v))
	require.Len(t, v.Schedules, 2)
	h := v.Schedules[1]
	assert.Equal(t, "hourly", h.Name)
	assert.Equal(t, "every 1h0m0s", h.Spec)
	assert.Equal(t, "latest", h.Missed)
	assert.Equal(t, uint64(1), h.Fired)
	require.NotNil(t, h.LastSlot)
	require.NotNil(t, h.NextSlot)
	assert.Equal(t, mock.Now().UTC(), *h.LastSlot)
	assert.Equal(t, mock.Now().Add(time.Hour).UTC(), *h.NextSlot)
	assert.Nil(t, v.Schedules[0].LastSlot, "never fired: null")
	assert.Equal(t, uint64(1), v.Schedules[0].Failures)

	// Fire now, from the page's form: a publish with its own dedup ID.
	status, _, hdr := post(t, srv.URL+"/actions/schedule-trigger", url.Values{"schedule": {"hourly"}, "back": {"/schedules"}})
	require.Equal(t, http.StatusSeeOther, status)
	loc, err := url.Parse(hdr.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "Fired schedule hourly now.", loc.Query().Get("done"))
	assert.Equal(t, 2, sub.Stats().Visible, "the slot's message and the fire's")

	var res console.Result
	status, body, _ = post(t, srv.URL+"/api/actions/schedule-pause", url.Values{"schedule": {"hourly"}})
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, jsonOf(body, &res))
	assert.Equal(t, console.Result{Action: "schedule-pause", Schedule: "hourly"}, res)
	require.NoError(t, s.AwaitQuiet(ctx))
	mock.Add(2 * time.Hour)
	require.NoError(t, s.AwaitQuiet(ctx))
	assert.Equal(t, 2, sub.Stats().Visible, "paused: nothing fired")
	_, body = get(t, srv.URL+"/schedules")
	assert.Contains(t, body, `<span class="badge paused">paused</span>`)

	status, body, _ = post(t, srv.URL+"/api/actions/schedule-resume", url.Values{"schedule": {"hourly"}})
	require.Equal(t, http.StatusOK, status, body)
	getJSON(t, srv.URL+"/api/schedules", &v)
	assert.Equal(t, uint64(2), v.Schedules[1].SkippedPaused)
	assert.False(t, v.Schedules[1].Paused)

	status, body, _ = post(t, srv.URL+"/api/actions/schedule-trigger", url.Values{"schedule": {"broken"}})
	assert.Equal(t, http.StatusInternalServerError, status, body)
	assert.Contains(t, body, "the fire failed")
	status, body, _ = post(t, srv.URL+"/api/actions/schedule-pause", url.Values{"schedule": {"nope"}})
	assert.Equal(t, http.StatusNotFound, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/schedule-pause", url.Values{})
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, body, _ = post(t, srv.URL+"/api/actions/schedule-pause", url.Values{"schedule": {"hourly"}}, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status, body)
}

func TestSchedulesReadOnlyAndAbsent(t *testing.T) {
	b, mock := brokertest.New[string](t)
	s, err := schedule.New(schedule.WithClock(mock))
	require.NoError(t, err)
	require.NoError(t, s.Add("hourly", schedule.Every(time.Hour), func(context.Context, schedule.Fire) error { return nil }))

	ro := serve(t, b, console.WithSchedules(s), console.WithReadOnly())
	_, body := get(t, ro.URL+"/schedules")
	assert.NotContains(t, body, "schedule-trigger", "no buttons when read-only")
	status, _, _ := post(t, ro.URL+"/api/actions/schedule-trigger", url.Values{"schedule": {"hourly"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, uint64(0), s.Status()[0].Triggered)

	plain := serve(t, b)
	status, _ = get(t, plain.URL+"/schedules")
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = get(t, plain.URL+"/api/schedules")
	assert.Equal(t, http.StatusNotFound, status)
	status, _, _ = post(t, plain.URL+"/api/actions/schedule-pause", url.Values{"schedule": {"hourly"}})
	assert.Equal(t, http.StatusNotFound, status)
	_, body = get(t, plain.URL+"/")
	assert.NotContains(t, body, `href="/schedules"`)

	_, err = console.New(b, console.WithSchedules(nil))
	assert.ErrorIs(t, err, queue.ErrInvalidArgument)
}
