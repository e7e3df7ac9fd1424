package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/queue"
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

// lastID returns the ID of the last message billing holds: a search or an
// action that finds it has read the whole queue.
func lastID(b *testing.B, br *broker.Broker[[]byte]) string {
	s, err := br.Subscription("orders", "billing")
	if err != nil {
		b.Fatal(err)
	}
	hs, err := s.Peek(queue.PeekQuery{After: 999_999, Limit: 1})
	if err != nil || len(hs) != 1 {
		b.Fatalf("the last message: %v %v", hs, err)
	}
	return hs[0].ID.String()
}

// Finding one message among a million: by its ID (one pass over each
// subscription, none indexed), its page, and an action on it.
func BenchmarkSearchByID1M(b *testing.B) {
	br := millionBroker(b)
	benchOn(b, br, "/api/search?q="+lastID(b, br))
}

func BenchmarkSearchByKey1M(b *testing.B) { benchPage(b, "/api/search?q=cust-404") }

func BenchmarkMessagePage1M(b *testing.B) {
	br := millionBroker(b)
	benchOn(b, br, "/message?topic=orders&name=billing&id="+lastID(b, br))
}

func BenchmarkSearchLetters1M(b *testing.B) {
	br := millionLetters(b)
	benchOn(b, br, "/api/search?q="+br.DeadLetters()[999_990].Message.ID.String())
}

// An action on the last of a million held messages: make it visible (it
// is: the action finds it and changes nothing).
func BenchmarkMakeVisibleAction1M(b *testing.B) {
	br := millionBroker(b)
	c, err := console.New(br)
	if err != nil {
		b.Fatal(err)
	}
	form := url.Values{"topic": {"orders"}, "name": {"billing"}, "id": {lastID(b, br)}}.Encode()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/api/actions/message-visible", strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%d: %s", rec.Code, rec.Body)
		}
	}
}
