// Command reopenbench measures a durable broker's Open as a restart is: in
// a process of its own, with a heap that nothing used before. With -build
// it first writes the journal (as broker's BenchmarkDurableOpen does, at
// any size); without, it opens the directory and prints one line that
// benchstat reads, so that runs of two builds can be compared:
//
//	go run ./internal/cmd/reopenbench -dir /tmp/j -build 1000000 -dedup
//	go build -o /tmp/reopen ./internal/cmd/reopenbench
//	for i in 1 2 3 4 5 6; do /tmp/reopen -dir /tmp/j; done > new.txt
//
// With -floor N it opens nothing: it times making only what a broker
// reopened with N live messages holds, the floor under any Open of them.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/queue"
)

func main() {
	dir := flag.String("dir", "", "the journal's directory (required)")
	build := flag.Int("build", 0, "write a journal of this many live messages (and as many published and acked) first, replacing the directory")
	dedup := flag.Bool("dedup", false, "with -build: every publish has a dedup ID")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the Open to this file")
	floor := flag.Int("floor", 0, "instead of an Open, time only making what a broker reopened with this many live messages holds (see allocFloor)")
	flag.Parse()
	if *floor > 0 {
		allocFloor(*floor)
		return
	}
	if *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	if *build > 0 {
		if err := write(*dir, *build, *dedup); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	br, err := broker.Open(*dir, queue.BytesCodec(), opts()...)
	if err != nil {
		log.Fatal(err)
	}
	took := time.Since(start)
	r := br.Recovery()
	fmt.Printf("BenchmarkReopen/records=%d 1 %d ns/op %.0f records/s %.0f ns/msg\n",
		r.Records, took.Nanoseconds(), float64(r.Records)/took.Seconds(), float64(took.Nanoseconds())/float64(r.Messages+r.DeadLetters))
	if err := br.Close(); err != nil {
		log.Fatal(err)
	}
}

// opts are the broker's options when it writes and when it opens: nothing
// compacts, and no dead letter or dedup ID is let go of.
func opts() []broker.Option {
	return []broker.Option{broker.WithCompactMin(-1), broker.WithDeadLetterLimit(1 << 30),
		broker.WithDedupWindow(time.Hour), broker.WithDedupLimit(1 << 30)}
}

// write leaves in dir a journal of live messages of 64 bytes, a tenth of
// them failed once and a hundredth of them dead-lettered, and as many
// more published and acked.
func write(dir string, live int, dedup bool) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	br, err := broker.Open(dir, queue.BytesCodec(), append(opts(), broker.WithSync(broker.SyncNone),
		broker.WithSubscriptionDefaults(broker.WithMaxQueue(1<<30), broker.WithRetry(queue.RetryPolicy{NoBackoff: true})))...)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := br.CreateTopic("t"); err != nil {
		return err
	}
	s, err := br.Subscribe("t", "s")
	if err != nil {
		return err
	}
	payload := make([]byte, 64)
	n := 0
	publish := func() error {
		var o []broker.PublishOption
		if n++; dedup {
			o = append(o, broker.WithDedupID(fmt.Sprint("order-", n)))
		}
		_, err := br.Publish(ctx, "t", payload, o...)
		return err
	}
	for range live {
		if err := publish(); err != nil {
			return err
		}
	}
	for i, d := range s.TryPoll(live / 10) {
		if i%10 == 0 {
			err = s.Reject(d.LeaseID, nil)
		} else {
			err = s.Fail(d.LeaseID, nil)
		}
		if err != nil {
			return err
		}
	}
	buf := make([]queue.Delivery[[]byte], 100)
	for range live / 100 {
		for range 100 {
			if err := publish(); err != nil {
				return err
			}
		}
		k, err := s.TryPollInto(buf)
		if err != nil {
			return err
		}
		for _, d := range buf[:k] {
			if err := s.Ack(d.LeaseID); err != nil {
				return err
			}
		}
	}
	return br.Close()
}

// floorEntry stands for what a queue holds of a message beside its
// envelope: a 56-byte entry with one pointer, in blocks of 4,096.
type floorEntry struct {
	m *queue.Message[[]byte]
	_ [6]int64
}

// allocFloor times making, in a fresh heap, what a broker reopened with n
// live messages of the journal write leaves holds and nothing else: each
// message's envelope, its 64-byte payload and its entry. No Open can be
// faster: it makes these, and replays the journal besides. It prints a
// line benchstat reads beside Open's.
func allocFloor(n int) {
	start := time.Now()
	var blocks [][]floorEntry
	es := make([]floorEntry, 0, 4096)
	at := time.Now()
	for i := range n {
		m := &queue.Message[[]byte]{Topic: "t", PublishedAt: at, Payload: make([]byte, 64)}
		m.ID[0], m.Payload[0] = byte(i), byte(i)
		es = append(es, floorEntry{m: m})
		if len(es) == cap(es) {
			blocks = append(blocks, es)
			es = make([]floorEntry, 0, 4096)
		}
	}
	took := time.Since(start)
	fmt.Printf("BenchmarkReopenFloor/messages=%d 1 %d ns/op %.0f ns/msg\n", n, took.Nanoseconds(), float64(took.Nanoseconds())/float64(n))
	runtime.KeepAlive(blocks)
}
