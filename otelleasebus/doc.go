// Package otelleasebus instruments leasebus with OpenTelemetry: metrics
// of every subscription, spans that follow a message from its publisher to
// the handler that processes it, and the handler durations and outcomes
// of a poller. It follows the OpenTelemetry semantic conventions for
// messaging (semconv v1.43.0) where they apply, with messaging.system
// "leasebus"; what they do not cover is named under "leasebus.".
//
// Three pieces, each usable alone:
//
//	// Metrics of a subscription, read from sub.Stats() at each collection.
//	reg, err := otelleasebus.ObserveSubscription(sub)
//	defer reg.Unregister()
//
//	// Publishes in producer spans, whose context travels in the headers.
//	pub, err := otelleasebus.NewPublisher(b)
//	msg, err := pub.Publish(ctx, "orders", order)
//
//	// A process span per delivery, handler durations and outcomes.
//	mw, err := otelleasebus.NewMiddleware(sub)
//	p, err := poller.New(sub, mw.Handler(handle), mw.Observer(), poller.WithWorkers(8))
//
// Every constructor takes the same options: WithMeterProvider and
// WithTracerProvider (default: the global ones), WithPropagator,
// WithClock, WithPublisherAsParent and WithAttributes.
//
// # Subscription metrics
//
// ObserveSubscription, ObserveBroker (every subscription of a broker, as
// they come and go) and ObserveStats (a backend whose statistics come
// from a function, such as a JetStream subscription's Stats(ctx)) register
// one callback on asynchronous instruments: nothing runs on the publish or
// delivery path, and every collection reads exact values. Each
// measurement carries messaging.system, messaging.destination.name (the
// subscription's topic, or its pattern), messaging.consumer.group.name and
// messaging.destination.subscription.name (the subscription's name: a
// leasebus subscription is both, a copy of the topic that competing
// consumers share).
//
//	leasebus.subscription.messages            UpDownCounter {message}  by leasebus.message.state: visible, delayed, in_flight, held_back
//	leasebus.subscription.oldest_visible.age  Gauge s                  now less the PublishedAt of the oldest visible message; 0 when none
//	leasebus.subscription.published           Counter {message}        messages the subscription accepted
//	leasebus.subscription.delivered           Counter {message}        deliveries, first or not
//	leasebus.subscription.acked               Counter {message}
//	leasebus.subscription.redelivered         Counter {message}        deliveries with an attempt above 1
//	leasebus.subscription.dead_lettered       Counter {message}        by leasebus.dead_letter.reason: max-attempts, overflow, expired, rejected, cancelled (unknown: counted by a backend without a reason)
//	leasebus.subscription.dropped             Counter {message}        removed by a chosen policy: drop-oldest overflow, purge
//	leasebus.subscription.redriven            Counter {message}        dead letters put back by Redrive
//	leasebus.subscription.rejected            Counter {message}        publishes a full subscription refused
//
// # Schedule metrics
//
// ObserveSchedules reports a schedule.Scheduler's schedules the same way:
// slots fired and skipped (by cause), fires by hand, failures, whether
// paused, and the Unix times of the next and the last fire, each with
// leasebus.schedule.name.
//
// # Publishing
//
// A Publisher wraps a broker's Publish and PublishBatch in a span
// "publish <topic>" of kind producer (messaging.operation.name "publish",
// messaging.operation.type "send", messaging.destination.name,
// messaging.message.id, messaging.batch.message_count for a batch), and
// injects its context into the message headers with the propagator (W3C
// traceparent and tracestate, and baggage, unless a global propagator is
// set). It counts messaging.client.sent.messages and times
// messaging.client.operation.duration on the broker's clock, with
// error.type when the publish fails.
//
// # Processing
//
// A Middleware wraps a poller's handler: each delivery is counted
// (messaging.client.consumed.messages) and processed in a span "process
// <topic>" of kind consumer, with messaging.message.id,
// leasebus.message.delivery_attempt, leasebus.message.max_attempts and
// leasebus.message.key. The span links to the publisher's span (the
// message's creation context), as the semantic conventions recommend, or
// is its child with WithPublisherAsParent. The handler gets the span's
// context, with the message's baggage. When the poller reports the
// outcome, the span ends at the time the handler returned, with
// leasebus.outcome (acked, retried, dead-lettered, settle-failed), error.type and an
// error status if the handler failed or the source refused the settling
// call, and "lease extended" events for the extensions made meanwhile.
//
//	messaging.process.duration  Histogram s        the handler's duration on the clock, by leasebus.outcome and error.type
//	leasebus.poller.outcomes    Counter {event}    every outcome the poller reported: acked, retried, dead-lettered, released, extended, extension-stopped, settle-failed; error.type when the source refused the call
//
// error.type names leasebus's errors by their meaning (lease_expired,
// lease_not_found, closed, queue_full, topic_not_found, ...), a handler's
// panic as "panic", a context's end as "timeout" or "canceled", an error
// with an ErrorType() string method by what it returns, and any other
// error by its Go type, seen through fmt.Errorf wrappers and through
// poller.RetryAfter and poller.GiveUp.
//
// # Time
//
// Handler durations, publish durations and span timestamps come from the
// clock of the broker or source (or WithClock), so a test on a
// benbjohnson/clock mock reads them exactly.
//
// # Cost
//
// With no SDK installed (the global providers' defaults), a publish costs
// a span that records nothing and an Inject that writes nothing, and a
// delivery a non-recording span and no bookkeeping. The subscription
// metrics cost nothing until a reader collects.
package otelleasebus
