package broker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

// A pause is recorded: it outlives a restart and a compaction, and a copy
// shows it; a resume is recorded too.
func TestDurablePauseOutlivesARestart(t *testing.T) {
	d := openDur[string](t, queue.StringCodec())
	require.NoError(t, d.CreateTopic("t"))
	s, err := d.Subscribe("t", "s")
	require.NoError(t, err)
	_, err = d.Subscribe("t", "other")
	require.NoError(t, err)
	_, err = d.Publish(ctx, "t", "a")
	require.NoError(t, err)
	require.NoError(t, s.Pause())

	d.restart()
	s, err = d.Subscribe("t", "s")
	require.NoError(t, err)
	assert.True(t, s.Stats().Paused, "paused after a restart")
	assert.Empty(t, s.TryPoll(1))
	other, err := d.Subscription("t", "other")
	require.NoError(t, err)
	assert.False(t, other.Stats().Paused, "the other one runs")

	require.NoError(t, d.Compact())
	cp, err := broker.OpenCopy(d.dir, queue.StringCodec())
	require.NoError(t, err)
	cs, err := cp.Subscription("t", "s")
	require.NoError(t, err)
	assert.True(t, cs.Stats().Paused, "a copy shows it")
	require.NoError(t, cp.Close())

	d.restart()
	s, err = d.Subscribe("t", "s")
	require.NoError(t, err)
	assert.True(t, s.Stats().Paused, "after a compaction and a restart")
	require.NoError(t, s.Resume())

	d.restart()
	s, err = d.Subscribe("t", "s")
	require.NoError(t, err)
	assert.False(t, s.Stats().Paused, "the resume is recorded too")
	assert.Equal(t, []string{"a"}, payloads(s.TryPoll(1)))
}
