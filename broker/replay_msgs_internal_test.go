package broker

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/leasebus/leasebus/internal/testkit"
)

// TestRmsgsModel drives a replay's message table and a map with the same
// random puts (mostly the next ID of a topic, as publishes make them; some
// of another topic, as a pattern subscription gets them; some after a gap
// in the counters, as a filter leaves; some of an ID held already, as a
// redrive puts one back in its place), removes and
// purges, and compares every lookup and what the restore would get. The
// sizes make it compact its holes, spill runs to its index, and sort.
func TestRmsgsModel(t *testing.T) {
	for seed := range uint64(testkit.Scale(8, 1)) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			var tab rmsgs
			model := map[uuid.UUID]uint64{} // ID → place
			ctr := []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
			prefixes := []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
			place := uint64(0)
			idOf := func(topic int, c uint64) uuid.UUID {
				var id uuid.UUID
				binary.BigEndian.PutUint64(id[:8], prefixes[topic])
				binary.BigEndian.PutUint64(id[8:], c)
				return id
			}
			put := func(id uuid.UUID, at uint64) {
				env := make([]byte, 17)
				copy(env, id[:])
				tab.add(id, rmsg{env: env, place: at})
				model[id] = at
			}
			someHeld := func() (uuid.UUID, bool) {
				for id := range model { // map order: random enough
					return id, true
				}
				return uuid.UUID{}, false
			}
			spread := 1 // topics in play: 1, then 3 for the second half
			for i := range 60_000 {
				if i == 30_000 {
					spread = 3
				}
				switch r := rng.IntN(100); {
				case r < 55: // publish, perhaps after messages a filter kept out
					topic := rng.IntN(spread)
					ctr[topic]++
					if g := rng.IntN(100); g < 20 {
						ctr[topic] += uint64(rng.IntN(10))
					} else if g < 21 {
						ctr[topic] += maxGap + uint64(rng.IntN(10))
					}
					place++
					put(idOf(topic, ctr[topic]), place)
				case r < 57: // a redrive: an ID held (or just gone) put back at an older place
					if id, ok := someHeld(); ok {
						put(id, model[id]/2)
					}
				case r < 97: // an ack, mostly of the oldest
					id, ok := someHeld()
					if rng.IntN(4) > 0 {
						for k, at := range model {
							if at < model[id] {
								id = k
							}
						}
					}
					if ok {
						tab.remove(id, false)
						delete(model, id)
					}
					tab.remove(idOf(0, rng.Uint64()), false) // not held: nothing happens
				case r < 98: // a purge of every other
					tab.removeIf(func(m *rmsg) bool { return m.place%2 == 0 })
					maps.DeleteFunc(model, func(_ uuid.UUID, at uint64) bool { return at%2 == 0 })
				default: // a lookup of a held one and of one never put
					if id, ok := someHeld(); ok {
						m := tab.get(id)
						require.NotNil(t, m)
						require.Equal(t, model[id], m.place)
					}
					require.Nil(t, tab.get(idOf(1, rng.Uint64())))
				}
				require.Equal(t, len(model), tab.live)
				require.LessOrEqual(t, len(tab.ids.runs), maxRuns)
			}
			for id, at := range model {
				m := tab.get(id)
				require.NotNil(t, m, "%v", id)
				require.Equal(t, at, m.place)
			}
			var got []uint64
			for _, m := range tab.inPlaceOrder() {
				got = append(got, m.place)
			}
			want := slices.Sorted(maps.Values(model))
			require.Equal(t, want, got)
			require.True(t, slices.IsSortedFunc(got, cmp.Compare[uint64]))
			require.Less(t, tab.n, 2*len(model)+2*rpage, "compacted")
		})
	}
}
