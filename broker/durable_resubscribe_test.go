package broker_test

// Subscribe after a restart binds a recovered subscription as it was
// stored; an explicit option that differs is a *ConfigMismatchError, and
// nothing changes, unless WithUpdate asks for the change.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

func TestDurableResubscribeBindsAsStored(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	d.subscribe("t", "s", broker.WithMaxAttempts(2), broker.WithVisibilityTimeout(time.Minute), broker.WithDeadLetterTopic("dlq"))
	d.restart()

	s, err := d.Subscribe("t", "s") // a program that forgot its options
	require.NoError(t, err)
	c := s.Config()
	assert.Equal(t, 2, c.MaxAttempts, "as stored, not the default")
	assert.Equal(t, time.Minute, c.VisibilityTimeout)

	d.restart()
	_, err = d.Subscribe("t", "s", broker.WithMaxAttempts(2)) // the same: fine
	require.NoError(t, err)

	d.restart()
	_, err = d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithDeadLetterTopic("other"))
	require.ErrorIs(t, err, broker.ErrConfigMismatch)
	var me *broker.ConfigMismatchError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "s", me.Subscription)
	assert.Equal(t, []broker.Diff{
		{Setting: "MaxAttempts", Option: "WithMaxAttempts", Stored: "2", Requested: "5"},
		{Setting: "DeadLetterTopic", Option: "WithDeadLetterTopic", Stored: `"dlq"`, Requested: `"other"`},
	}, me.Diffs)
	s, err = d.Subscribe("t", "s") // nothing changed: it binds as stored
	require.NoError(t, err)
	assert.Equal(t, 2, s.Config().MaxAttempts)

	d.restart()
	s, err = d.Subscribe("t", "s", broker.WithMaxAttempts(5), broker.WithUpdate())
	require.NoError(t, err)
	assert.Equal(t, 5, s.Config().MaxAttempts, "updated")
	assert.Equal(t, time.Minute, s.Config().VisibilityTimeout, "what the options do not name stays")
	d.restart()
	s, err = d.Subscribe("t", "s")
	require.NoError(t, err)
	assert.Equal(t, 5, s.Config().MaxAttempts, "the update is stored")

	_, err = d.Subscribe("t", "s", broker.WithUpdate())
	require.ErrorIs(t, err, broker.ErrAlreadySubscribed, "bound already in this process")
}

// A filter is a function and is not stored, only that there was one: it
// must be given again, and adding or dropping one is an update.
func TestDurableResubscribeFilter(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	keep := broker.WithFilter(func(m queue.Message[string]) bool { return m.Payload != "skip" })
	d.subscribe("t", "filtered", keep)
	d.subscribe("t", "plain")
	d.restart()

	_, err := d.Subscribe("t", "filtered")
	var me *broker.ConfigMismatchError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, []broker.Diff{{Setting: "Filter", Option: "WithFilter", Stored: "a filter", Requested: "none"}}, me.Diffs)
	_, err = d.Subscribe("t", "plain", keep)
	require.ErrorIs(t, err, broker.ErrConfigMismatch)

	f, err := d.Subscribe("t", "filtered", keep)
	require.NoError(t, err)
	_, err = d.Subscribe("t", "plain", keep, broker.WithUpdate())
	require.NoError(t, err)
	d.publish("t", "skip")
	d.publish("t", "take")
	assert.Equal(t, []string{"take"}, payloads(f.TryPoll(10)))
}

// A filter given to Open as every subscription's default is a filter the
// recovered subscription is declared with (filters are not stored).
func TestDurableResubscribeDefaultFilter(t *testing.T) {
	keep := broker.WithFilter(func(m queue.Message[string]) bool { return m.Payload != "skip" })
	d := openDur[string](t, queue.StringCodec(), broker.WithSubscriptionDefaults(keep))
	d.subscribe("t", "s")
	d.restart()
	s, err := d.Subscribe("t", "s")
	require.NoError(t, err)
	d.publish("t", "skip")
	d.publish("t", "take")
	assert.Equal(t, []string{"take"}, payloads(s.TryPoll(10)))
}
