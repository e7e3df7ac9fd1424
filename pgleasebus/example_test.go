package pgleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasebus/leasebus/pgleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

// A service's replicas share one subscription on the database they
// already have: each publishes orders in the transaction that stores
// them, and runs a pool of workers over the subscription. (Examples here
// need a database, DATABASE_URL: they are compiled by go test, not run;
// examples/signups is one whose test runs it.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	bus, err := pgleasebus.Open(ctx, pool) // creates or migrates schema "leasebus"
	if err != nil {
		log.Fatal(err)
	}
	defer bus.Close()
	if err := bus.CreateTopic(ctx, "orders"); err != nil {
		log.Fatal(err)
	}
	sub, err := pgleasebus.Subscribe(ctx, bus, "orders", "billing", queue.JSONCodec[Order](),
		pgleasebus.WithVisibilityTimeout(30*time.Second), pgleasebus.WithMaxAttempts(5))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	pub, err := pgleasebus.NewPublisher(bus, queue.JSONCodec[Order]())
	if err != nil {
		log.Fatal(err)
	}

	// The order and its message commit together, or neither does.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// tx.Exec(ctx, "INSERT INTO orders ...")
		_, err := pub.PublishTx(ctx, tx, "orders", Order{ID: 1, Customer: "c-7"}, queue.WithKey("c-7"))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	p, err := poller.New(sub, func(ctx context.Context, d queue.Delivery[Order]) error {
		fmt.Println("billing order", d.Payload.ID, "attempt", d.Attempt)
		return nil
	}, poller.WithWorkers(8))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := p.Run(runCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Fatal(err)
	}
}

// Dead letters are rows: read them with their reason, attempts, last error
// and history, and redrive the ones a fix has made good.
func ExampleRedriveWith() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	bus, err := pgleasebus.Open(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	defer bus.Close()
	dls, err := pgleasebus.DeadLetters(ctx, bus, queue.JSONCodec[Order]())
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range dls {
		fmt.Println(dl.Subscription, dl.Message.ID, dl.Reason, dl.Attempts, dl.LastError)
	}
	n, err := pgleasebus.RedriveWith(ctx, bus, queue.JSONCodec[Order](), func(dl queue.DeadLetter[Order]) (Order, bool) {
		o := dl.Message.Payload
		if o.Customer == "" {
			o.Customer = "unknown" // the fix
			return o, true
		}
		return o, false
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("redriven:", n)
}
