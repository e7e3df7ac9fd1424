package natsleasebus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasebus/leasebus/natsleasebus"
	"github.com/leasebus/leasebus/queue"
)

// A delayed publish on a bus opened WithDelays: the message is a JetStream
// message schedule, delivered when due on its first attempt. Priorities and
// ordering keys are refused, with an error that says why.
func ExampleWithDelay() {
	dir, err := os.MkdirTemp("", "leasebus-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus, err := natsleasebus.Open(ctx, nc, natsleasebus.WithMemoryStorage(), natsleasebus.WithDelays())
	if err != nil {
		panic(err)
	}
	sub, err := natsleasebus.Subscribe[string](ctx, bus, "reminders", "mailer")
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	msg, err := natsleasebus.Publish(ctx, bus, "reminders", "renew your plan", queue.WithDelay(500*time.Millisecond))
	if err != nil {
		panic(err)
	}
	ds, err := sub.Poll(ctx, 1) // blocks until it is due
	if err != nil {
		panic(err)
	}
	d := ds[0]
	fmt.Printf("%q on attempt %d, not before its delay: %v\n", d.Payload, d.Attempt, time.Since(msg.PublishedAt) >= 500*time.Millisecond)
	if err := sub.Ack(d.LeaseID); err != nil {
		panic(err)
	}

	_, err = natsleasebus.Publish(ctx, bus, "reminders", "urgent", queue.WithPriority(queue.PriorityHigh))
	fmt.Println(errors.Is(err, natsleasebus.ErrUnsupported))
	// Output:
	// "renew your plan" on attempt 1, not before its delay: true
	// true
}
