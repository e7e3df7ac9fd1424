package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasebus/leasebus/backend"
)

// History defaults: a point a minute, three hours of them.
const (
	defaultHistoryStep   = time.Minute
	defaultHistoryPoints = 180
)

// WithHistory sets what Record keeps: a point every step, the last points
// of them, for each subscription (by default a point a minute for three
// hours). Each point costs 64 bytes per subscription, so the history's
// memory is fixed: points × subscriptions × 64 bytes. step must be at
// least a second and points from 2 to 100,000, or New refuses them.
func WithHistory(step time.Duration, points int) Option {
	return Option{func(c *config) {
		if step < time.Second || points < 2 || points > 100_000 {
			c.err = backend.Invalid("console: WithHistory(%v, %d): the step must be >= 1s and the points 2 to 100000", step, points)
		}
		c.step, c.points = step, points
	}}
}

// sample is one reading of a subscription's counters and depth.
type sample struct {
	at                                                      int64 // Unix nanoseconds, on the backend's clock
	published, delivered, acked, redelivered, dead, dropped uint64
	depth                                                   int64
}

// ring is a subscription's last samples, oldest first from head.
type ring struct {
	s    []sample
	head int
	seen int64 // the sample round that last saw the subscription
}

func (r *ring) add(s sample, max int) {
	if len(r.s) < max {
		r.s = append(r.s, s)
		return
	}
	r.s[r.head] = s
	r.head = (r.head + 1) % max
}

func (r *ring) all() []sample {
	return append(append([]sample(nil), r.s[r.head:]...), r.s[:r.head]...)
}

// history is what Record keeps, guarded by mu.
type history struct {
	mu      sync.Mutex
	running bool
	round   int64
	subs    map[[2]string]*ring // by topic and name

	clk       clock.Clock   // Record's, while it runs
	start     time.Time     // when Record began, on clk: its steps count from it
	sampled   time.Time     // when Record's last sample began, once it has ended; zero: none yet
	sampledCh chan struct{} // closed and replaced when a sample ends
}

// ErrRecording is Record's answer while another Record of the console runs.
var ErrRecording = errors.New("console: Record is running already")

// clocked is a backend that says which clock it reads (the broker does):
// Record samples on it, so that a test's mock clock drives the history.
type clocked interface{ Clock() clock.Clock }

func (bb brokerBackend[T]) Clock() clock.Clock { return bb.b.Clock() }

// Record samples every subscription's counters and depth every step (see
// WithHistory) on the backend's clock, until ctx ends, keeping the last
// points of them in memory for the charts on the overview and each
// subscription's page, and for api/history. It returns ctx's error. A
// console whose Record is not running shows no charts. Run it once: a
// second Record while one runs returns ErrRecording at once; a nil ctx is
// an error matching queue.ErrInvalidArgument.
//
// It costs the broker one Stats per subscription per step, nothing in
// between. A durable broker's history is not kept across a restart.
func (c *Console[T]) Record(ctx context.Context) error {
	if ctx == nil {
		return backend.Invalid("console: Record: nil context")
	}
	clk := clock.Clock(clock.New())
	if cb, ok := c.be.(clocked); ok {
		clk = cb.Clock()
	}
	h := &c.hist
	h.mu.Lock()
	if h.running {
		h.mu.Unlock()
		return ErrRecording
	}
	h.running = true
	t := clk.Ticker(c.cfg.step) // its steps count from start
	h.clk, h.start, h.sampled = clk, clk.Now(), time.Time{}
	h.mu.Unlock()
	defer t.Stop()
	defer func() {
		h.mu.Lock()
		h.running = false
		if h.sampledCh != nil {
			close(h.sampledCh)
			h.sampledCh = nil
		}
		h.mu.Unlock()
	}()
	for {
		at := clk.Now()
		c.sample(ctx)
		h.mu.Lock()
		h.sampled = at
		if h.sampledCh != nil {
			close(h.sampledCh)
			h.sampledCh = nil
		}
		h.mu.Unlock()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sample adds a point for every subscription; one that is gone loses its
// history.
func (c *Console[T]) sample(ctx context.Context) {
	subs, err := c.be.Subscriptions(ctx)
	if err != nil {
		return // a closed broker, a backend that did not answer: no point this step
	}
	at := c.be.Now().UnixNano()
	h := &c.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	h.round++
	if h.subs == nil {
		h.subs = map[[2]string]*ring{}
	}
	for _, s := range subs {
		k := [2]string{s.Topic, s.Name}
		r := h.subs[k]
		if r == nil {
			r = &ring{}
			h.subs[k] = r
		}
		st := s.Stats
		r.add(sample{at: at, published: st.Published, delivered: st.Delivered, acked: st.Acked, redelivered: st.Redelivered,
			dead: st.DeadLettered, dropped: st.Dropped, depth: int64(st.Visible + st.Delayed + st.InFlight + st.HeldBack)}, c.cfg.points)
		r.seen = h.round
	}
	for k, r := range h.subs {
		if r.seen != h.round {
			delete(h.subs, k)
		}
	}
}

// HistoryView is the JSON of api/history: one subscription's points, or
// with no topic and name every subscription's.
type HistoryView struct {
	Recording bool            `json:"recording"` // Record is running
	Step      float64         `json:"stepSeconds"`
	Series    []HistorySeries `json:"subscriptions"`
}

// HistorySeries is one subscription's history, oldest point first.
type HistorySeries struct {
	Topic  string         `json:"topic"`
	Name   string         `json:"name"`
	Points []HistoryPoint `json:"points"`
}

// HistoryPoint is one step: what happened since the point before (the
// counts) and the depth at its end. A subscription's first point has
// counts of 0: there is nothing before it to count from.
type HistoryPoint struct {
	At           time.Time `json:"at"`
	Published    uint64    `json:"published"`
	Delivered    uint64    `json:"delivered"`
	Acked        uint64    `json:"acked"`
	Retried      uint64    `json:"retried"` // deliveries past the first
	DeadLettered uint64    `json:"deadLettered"`
	Dropped      uint64    `json:"dropped"`
	Depth        int64     `json:"depth"`
}

// historyOf returns the history of the subscriptions keep selects.
func (c *Console[T]) historyOf(keep func(topic, name string) bool) HistoryView {
	h := &c.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	v := HistoryView{Recording: h.running, Step: c.cfg.step.Seconds(), Series: []HistorySeries{}}
	for k, r := range h.subs {
		if keep(k[0], k[1]) {
			v.Series = append(v.Series, seriesOf(k, r))
		}
	}
	slices.SortFunc(v.Series, func(a, b HistorySeries) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Name, b.Name))
	})
	return v
}

// seriesOf returns the history r keeps of the subscription k (topic, name)
// as points: each step's counts are the differences of its samples. A
// counter that went down between two samples (the subscription was made
// again, or its broker opened again, and counts from zero) starts a new
// run: that step counts what the new samples say.
func seriesOf(k [2]string, r *ring) HistorySeries {
	ss := r.all()
	hs := HistorySeries{Topic: k[0], Name: k[1], Points: make([]HistoryPoint, len(ss))}
	for i, s := range ss {
		p := HistoryPoint{At: time.Unix(0, s.at).UTC(), Depth: s.depth}
		if i > 0 {
			b := ss[i-1]
			if s.published < b.published || s.delivered < b.delivered || s.acked < b.acked ||
				s.redelivered < b.redelivered || s.dead < b.dead || s.dropped < b.dropped {
				b = sample{} // a reset: the counters start from zero
			}
			p.Published, p.Delivered, p.Acked = s.published-b.published, s.delivered-b.delivered, s.acked-b.acked
			p.Retried, p.DeadLettered, p.Dropped = s.redelivered-b.redelivered, s.dead-b.dead, s.dropped-b.dropped
		}
		hs.Points[i] = p
	}
	return hs
}

func (c *Console[T]) historyJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topic, name := q.Get("topic"), q.Get("name")
	writeJSON(w, http.StatusOK, c.historyOf(func(t, n string) bool { return (topic == "" || t == topic) && (name == "" || n == name) }))
}

// chart draws series as an SVG line chart, w by h, one polyline each:
// markup made of numbers alone, with a title per series for its last value.
func chart(w, h int, series ...chartLine) template.HTML {
	var top float64
	n := 0
	for _, s := range series {
		n = max(n, len(s.v))
		for _, v := range s.v {
			top = max(top, v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, w, h, w, h)
	if n < 2 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	label := strconv.FormatFloat(top, 'f', -1, 64)
	if top == 0 {
		top = 1 // every line flat at the bottom
	}
	for _, s := range series {
		fmt.Fprintf(&b, `<polyline class="%s" fill="none" points="`, s.class)
		for i, v := range s.v {
			x := float64(i) * float64(w-2) / float64(n-1)
			y := float64(h-2) - v/top*float64(h-4)
			fmt.Fprintf(&b, "%.1f,%.1f ", x+1, y)
		}
		b.WriteString(`"/>`)
	}
	fmt.Fprintf(&b, `<text x="%d" y="10" class="max">%s</text></svg>`, w-2, label)
	return template.HTML(b.String())
}

// chartLine is one line of a chart: its CSS class and its values.
type chartLine struct {
	class string
	v     []float64
}

// series returns one subscription's history, or nil if none is kept.
func (c *Console[T]) series(topic, name string) *HistorySeries {
	k := [2]string{topic, name}
	c.hist.mu.Lock()
	defer c.hist.mu.Unlock()
	r := c.hist.subs[k] // one lookup: the overview asks for each row's
	if r == nil {
		return nil
	}
	hs := seriesOf(k, r)
	return &hs
}

// lines returns the named lines of a series, for chart.
func (hs *HistorySeries) lines(names ...string) []chartLine {
	out := make([]chartLine, len(names))
	for i, name := range names {
		out[i].class = name
		for _, p := range hs.Points {
			var v float64
			switch name {
			case "published":
				v = float64(p.Published)
			case "acked":
				v = float64(p.Acked)
			case "retried":
				v = float64(p.Retried)
			case "dead":
				v = float64(p.DeadLettered)
			case "depth":
				v = float64(p.Depth)
			}
			out[i].v = append(out[i].v, v)
		}
	}
	return out
}

// recording reports whether Record runs.
func (c *Console[T]) recording() bool {
	c.hist.mu.Lock()
	defer c.hist.mu.Unlock()
	return c.hist.running
}

// AwaitRecorded blocks until Record runs and has taken the sample of the
// step its clock is in now (on a mock clock: the step the test's last move
// reached), so that the history a test reads next has it. It returns nil
// then, or ctx's error if ctx ends first (a console whose Record never
// runs, or has returned, waits for ctx). A move across several steps is
// one sample, as a ticker's missed ticks are. Start Record and call it
// before the first move, so that the steps count from Record's start.
func (c *Console[T]) AwaitRecorded(ctx context.Context) error {
	h := &c.hist
	for {
		h.mu.Lock()
		if h.running && !h.sampled.IsZero() {
			step := c.cfg.step
			if h.clk.Now().Sub(h.start)/step == h.sampled.Sub(h.start)/step {
				h.mu.Unlock()
				return nil
			}
		}
		if h.sampledCh == nil {
			h.sampledCh = make(chan struct{})
		}
		ch := h.sampledCh
		h.mu.Unlock()
		select {
		case <-ch: // a sample ended, or Record ended
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
