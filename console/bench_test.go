package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
)

// A million messages held by one subscription (and a second, empty
// subscription beside it): what the overview and a subscription's page
// cost when someone looks. Nothing here runs when no one does.
func millionBroker(b *testing.B) *broker.Broker[[]byte] {
	return millionPublished(b, broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<21)))
}

// millionPublished publishes a million 58-byte messages to a subscription
// of a broker with opts.
func millionPublished(b *testing.B, opts ...broker.Option) *broker.Broker[[]byte] {
	b.Helper()
	br, err := broker.New[[]byte](opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	if err := br.CreateTopic("orders"); err != nil {
		b.Fatal(err)
	}
	if _, err := br.Subscribe("orders", "billing"); err != nil {
		b.Fatal(err)
	}
	batch := make([][]byte, 10_000)
	for i := range batch {
		batch[i] = []byte(`{"order":12345,"card":"4242-4242-4242-4242","amount":42.5}`)
	}
	for range 100 {
		if _, err := br.PublishBatch(ctx, "orders", batch); err != nil {
			b.Fatal(err)
		}
	}
	return br
}

func benchPage(b *testing.B, path string) { benchOn(b, millionBroker(b), path) }

// benchOn measures a GET of path from a console over br.
func benchOn(b *testing.B, br *broker.Broker[[]byte], path string) {
	c, err := console.New(br)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d", path, rec.Code)
		}
	}
}

func BenchmarkSubscriptionPage1M(b *testing.B) {
	benchPage(b, "/subscription?topic=orders&name=billing")
}

func BenchmarkSubscriptionPageLast1M(b *testing.B) {
	benchPage(b, "/subscription?topic=orders&name=billing&after=999950")
}

func BenchmarkSubscriptionPageInFlight1M(b *testing.B) {
	benchPage(b, "/subscription?topic=orders&name=billing&state=in-flight")
}

func BenchmarkOverview1M(b *testing.B) {
	benchPage(b, "/")
}

func BenchmarkOverviewJSON1M(b *testing.B) {
	benchPage(b, "/api/overview")
}

// A million dead letters (each an overflow of a full subscription): one
// page of them, their JSON, a filtered page, and the overview over them.
func millionLetters(b *testing.B) *broker.Broker[[]byte] {
	br := millionPublished(b, broker.WithDeadLetterLimit(1<<21), broker.WithSubscriptionDefaults(broker.WithMaxQueue(1)))
	if n := len(br.DeadLetters()); n < 999_999 {
		b.Fatalf("%d dead letters", n)
	}
	return br
}

func benchLetters(b *testing.B, path string) { benchOn(b, millionLetters(b), path) }

func BenchmarkDeadLettersPage1M(b *testing.B)     { benchLetters(b, "/dead-letters") }
func BenchmarkDeadLettersPageLast1M(b *testing.B) { benchLetters(b, "/dead-letters?offset=999950") }
func BenchmarkDeadLettersJSON1M(b *testing.B)     { benchLetters(b, "/api/dead-letters") }
func BenchmarkDeadLettersFiltered1M(b *testing.B) {
	benchLetters(b, "/dead-letters?reason=overflow&subscription=billing")
}
func BenchmarkOverviewOverLetters1M(b *testing.B) { benchLetters(b, "/api/overview") }
