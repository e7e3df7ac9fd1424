package broker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestIDTableModel drives an idTable and a map with the same random puts,
// removes and expiries (and the sequence numbers across their wrap), and
// compares every lookup and the order of what is left.
func TestIDTableModel(t *testing.T) {
	for _, start := range []uint32{0, math.MaxUint32 - 700} {
		t.Run(fmt.Sprint("seq from ", start), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(start), 11))
			tab := &idTable[int]{next: start}
			type entry struct {
				msg uuid.UUID
				at  int64
			}
			model := map[string]entry{}
			var order []string // oldest first; removed ones stay, skipped
			now := int64(0)
			check := func() {
				require.Equal(t, len(model), tab.len())
				for id, e := range model {
					s, ok := tab.get(id)
					require.True(t, ok, id)
					require.Equal(t, e.msg, s.msg)
					require.Equal(t, e.at, s.at)
				}
				var want, got []string
				for i, id := range order { // each where it was put last
					if _, ok := model[id]; ok && !slices.Contains(order[i+1:], id) {
						want = append(want, id)
					}
				}
				tab.each(func(_ uint32, s *idSlot[int]) bool { got = append(got, s.id); return true })
				require.Equal(t, want, got)
			}
			for step := range 20000 {
				id := fmt.Sprintf("id-%d", rng.IntN(3000))
				switch k := rng.IntN(10); {
				case k < 6:
					now++
					e := entry{uuid.New(), now}
					tab.put(id, e.msg, e.at, nil)
					model[id] = e
					order = append(order, id)
				case k < 8:
					_, had := model[id]
					require.Equal(t, had, tab.remove(id))
					delete(model, id)
				case k < 9:
					_, ok := tab.get(id)
					_, want := model[id]
					require.Equal(t, want, ok)
				default: // everything older than a point in time
					cut := now - int64(rng.IntN(2000))
					tab.expire(func(at int64) bool { return at <= cut })
					for id, e := range model {
						if e.at <= cut {
							delete(model, id)
						}
					}
				}
				if step%500 == 0 {
					check()
				}
			}
			check()
			tab.expire(func(int64) bool { return true })
			require.Zero(t, tab.len())
			require.Empty(t, tab.chunks, "an empty table keeps no chunk")
		})
	}
}
