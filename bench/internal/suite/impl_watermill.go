package suite

import (
	"context"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// Watermill is Watermill's GoChannel Pub/Sub. Every Subscribe call is a
// subscription that gets every message; competing consumers share one
// subscription's channel. It has no leases: a message waits for Ack or
// Nack, with no deadline.
var Watermill = Impl{
	Name:   "watermill",
	Module: "github.com/ThreeDotsLabs/watermill v1.5.1 (pubsub/gochannel)",
	Notes: "message.NewMessage(watermill.NewUUID(), p); OutputChannelBuffer 1024; " +
		"receive 1 blocking + up to max-1 buffered; every queued message is a goroutine per subscription",
	peer: true,
	New:  newWatermill,
	maxMsgs: func(w Workload, short bool) int {
		if w.Bench == W4.Bench || short {
			return 0
		}
		return 50_000 // ~10 µs a message
	},
	skip: func(w Workload, _ bool) string {
		switch w.Bench {
		case Exp.Bench:
			return "no leases: a message waits for Ack/Nack with no deadline"
		case D1e6.Bench:
			return "each queued message parks a goroutine per subscription (~7 KB held, see Mem): 10^6 would hold ~7 GB"
		}
		return ""
	},
}

type watermillSystem struct {
	g      *gochannel.GoChannel
	chans  []<-chan *message.Message
	cancel context.CancelFunc
}

func newWatermill(s Setup) (System, error) {
	g := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
	ctx, cancel := context.WithCancel(context.Background())
	w := &watermillSystem{g: g, cancel: cancel}
	for range s.Subs {
		ch, err := g.Subscribe(ctx, "t")
		if err != nil {
			cancel()
			g.Close()
			return nil, err
		}
		w.chans = append(w.chans, ch)
	}
	return w, nil
}

func (w *watermillSystem) Publish(_ context.Context, p []byte) error {
	return w.g.Publish("t", message.NewMessage(watermill.NewUUID(), p))
}

func (w *watermillSystem) Consumer(sub int) Consumer { return watermillConsumer(w.chans[sub]) }

func (w *watermillSystem) Close() error {
	w.cancel()
	return w.g.Close()
}

type watermillConsumer <-chan *message.Message

func (c watermillConsumer) Take(ctx context.Context, max int, fn func([]byte)) (int, error) {
	var m *message.Message
	var ok bool
	select {
	case m, ok = <-c:
		if !ok {
			return 0, ErrClosed
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	n := 1
	for {
		if fn != nil {
			fn(m.Payload)
		}
		m.Ack()
		if n == max {
			return n, nil
		}
		select {
		case m, ok = <-c:
			if !ok {
				return n, nil
			}
			n++
		default:
			return n, nil
		}
	}
}
