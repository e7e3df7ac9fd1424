package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/console"
)

// A subscription's limits show in its options, and what waits for them
// in its counts, on the pages and in the JSON.
func TestLimitsShow(t *testing.T) {
	b, _ := brokertest.New[string](t)
	s := brokertest.Subscribe(t, b, "webhooks", "deliver", broker.WithRateLimit(1, time.Minute),
		broker.WithKeyRateLimit(2, time.Second), broker.WithKeyConcurrency(3), broker.WithFairKeys())
	brokertest.Publish(t, b, "webhooks", "a", "b", "c")
	require.Len(t, s.TryPoll(3), 1, "one token")
	srv := serve(t, b)

	var v console.SubscriptionView
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/subscription?topic=webhooks&name=deliver", &v))
	assert.Equal(t, 2, v.Row.Visible)
	assert.Equal(t, 2, v.Row.Limited)
	for _, want := range []console.Setting{
		{Option: "WithRateLimit", Value: "1 per 1m0s"},
		{Option: "WithKeyRateLimit", Value: "2 per 1s a key"},
		{Option: "WithKeyConcurrency", Value: "3 of a key at once"},
		{Option: "WithFairKeys", Value: "keys take turns"},
	} {
		assert.Contains(t, v.Options, want)
	}
	status, body := get(t, srv.URL+"/subscription?topic=webhooks&name=deliver")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `(<span id="limited">2</span> waiting for a rate limit)`)
	_, body = get(t, srv.URL+"/")
	assert.Contains(t, body, "2 (2 limited)")
}
