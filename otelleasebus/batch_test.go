package otelleasebus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasebus/leasebus/broker/brokertest"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

// A batch call is one process span, linked to each message's publish
// span, with messaging.batch.message_count; each message's outcome is an
// event on it and a count in the outcomes counter; the span ends after the
// last outcome, an error if any message failed.
func TestBatchHandlerOneSpanACall(t *testing.T) {
	tel := newTelemetry(t)
	b, _ := brokertest.New[string](t)
	sub := brokertest.Subscribe(t, b, "rows", "warehouse")
	pub, err := otelleasebus.NewPublisher(b, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := otelleasebus.NewMiddleware(sub, tel.options()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"r1", "r2", "r3"} {
		if _, err := pub.Publish(context.Background(), "rows", row); err != nil {
			t.Fatal(err)
		}
	}
	p, err := poller.NewBatch(sub, mw.BatchHandler(func(ctx context.Context, ds []queue.Delivery[string]) ([]error, error) {
		outs := make([]error, len(ds))
		for i, d := range ds {
			if d.Payload == "r2" {
				outs[i] = poller.GiveUp(errors.New("row r2 malformed"))
			}
		}
		return outs, nil
	}), mw.Observer(), poller.WithBatchMax(3, 0), poller.WithBatch(3))
	if err != nil {
		t.Fatal(err)
	}
	runUntilIdle(t, p)

	process := processSpans(tel.spans.Ended())
	if len(process) != 1 {
		t.Fatalf("%d process spans, want one for the call", len(process))
	}
	span := process[0]
	if got := attrs(span.Attributes())["messaging.batch.message_count"]; got != "3" {
		t.Errorf("messaging.batch.message_count %q, want 3", got)
	}
	if len(span.Links()) != 3 {
		t.Errorf("%d links, want one to each publish span", len(span.Links()))
	}
	outcomes := map[string]int{}
	for _, ev := range span.Events() {
		if ev.Name == "message settled" {
			outcomes[attrs(ev.Attributes)["leasebus.outcome"]]++
		}
	}
	if outcomes["acked"] != 2 || outcomes["dead-lettered"] != 1 {
		t.Errorf("events' outcomes %v, want 2 acked, 1 dead-lettered", outcomes)
	}
	if span.Status().Code.String() != "Error" {
		t.Errorf("status %v, want an error: r2 failed", span.Status())
	}
	const attrsOfSub = "messaging.consumer.group.name=warehouse,messaging.destination.name=rows,messaging.destination.subscription.name=warehouse,messaging.operation.name=process,messaging.system=leasebus"
	m := tel.collect(t)
	for k, want := range map[string]string{
		"messaging.client.consumed.messages{" + attrsOfSub + "}":                      "3",
		"leasebus.poller.outcomes{leasebus.outcome=acked," + attrsOfSub + "}":         "2",
		"leasebus.poller.outcomes{leasebus.outcome=dead-lettered," + attrsOfSub + "}": "1",
		"messaging.process.duration{leasebus.outcome=acked," + attrsOfSub + "}":       "count=2 sum=0",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
}
