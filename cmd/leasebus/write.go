package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/console"
	"github.com/leasebus/leasebus/internal/httpserve"
	"github.com/leasebus/leasebus/queue"
)

// openLocked opens dir as its owner would, taking the lock.
func openLocked(dir string) (*broker.Broker[[]byte], error) {
	b, err := broker.Open(dir, queue.BytesCodec())
	if errors.Is(err, broker.ErrLocked) {
		return nil, fmt.Errorf("%w: stop the process that holds it first (inspect, peek, dead-letters, export and console read it without the lock)", err)
	}
	return b, err
}

// refs is a repeatable -ref flag: "<message id>/<subscription>", as
// dead-letters prints them, or "<message id>/<subscription> <topic>", as
// the JSON's ref says, for the subscription of that name on topic alone.
type refs []ref

type ref struct {
	id         uuid.UUID
	sub, topic string
}

func (r *refs) String() string { return fmt.Sprint(*r) }

func (r *refs) Set(s string) error {
	idText, rest, ok := strings.Cut(s, "/")
	id, err := uuid.Parse(idText)
	sub, topic, _ := strings.Cut(rest, " ")
	if !ok || err != nil || sub == "" {
		return fmt.Errorf("%q is not <message id>/<subscription> [topic]", s)
	}
	*r = append(*r, ref{id, sub, topic})
	return nil
}

func (r refs) has(dl queue.DeadLetter[[]byte]) bool {
	for _, x := range r {
		if x.id == dl.Message.ID && x.sub == dl.Subscription && (x.topic == "" || x.topic == dl.Topic) {
			return true
		}
	}
	return false
}

// selection reads which dead letters redrive or discard act on: -ref,
// a filter, or -all; nothing chosen is a usage error, never "all".
type selection struct {
	filter
	refs refs
	all  bool
}

func (s *selection) flags(fs *flag.FlagSet) {
	s.filter.flags(fs)
	fs.Var(&s.refs, "ref", "this dead letter, as dead-letters prints it (<message id>/<subscription>, with -topic for one of a name used on several topics) or as its JSON ref says; repeatable")
	fs.BoolVar(&s.all, "all", false, "every dead letter")
}

func (s *selection) match() (func(queue.DeadLetter[[]byte]) bool, error) {
	if !s.all && s.filter.empty() && len(s.refs) == 0 {
		return nil, fmt.Errorf("%w: say which dead letters: -ref, a filter (-subscription, -topic, -reason, -error, -key, -since, -until), or -all", errUsage)
	}
	m, err := s.filter.match()
	if err != nil {
		return nil, err
	}
	if len(s.refs) == 0 {
		return m, nil
	}
	return func(dl queue.DeadLetter[[]byte]) bool { return s.refs.has(dl) && m(dl) }, nil
}

func redrive(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	var sel selection
	sel.flags(fs)
	payload := fs.String("payload", "", "put the one -ref dead letter back with this file's bytes as its payload, encoded as the owner's codec encodes (JSON for JSONCodec); - reads stdin")
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	match, err := sel.match()
	if err != nil {
		return err
	}
	var fixed []byte
	if *payload != "" {
		if len(sel.refs) != 1 {
			return fmt.Errorf("%w: -payload needs exactly one -ref", errUsage)
		}
		if *payload == "-" {
			fixed, err = io.ReadAll(os.Stdin)
		} else {
			fixed, err = os.ReadFile(*payload)
		}
		if err != nil {
			return err
		}
	}
	b, err := openLocked(pos[0])
	if err != nil {
		return err
	}
	var n int
	if fixed != nil {
		n, err = b.RedriveWith(func(dl queue.DeadLetter[[]byte]) ([]byte, bool) { return fixed, match(dl) })
	} else {
		n, err = b.Redrive(match)
	}
	fmt.Fprintf(out, "redrove %s\n", count(n, "dead letter"))
	return errors.Join(err, b.Close())
}

func discard(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("discard", flag.ContinueOnError)
	var sel selection
	sel.flags(fs)
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	match, err := sel.match()
	if err != nil {
		return err
	}
	b, err := openLocked(pos[0])
	if err != nil {
		return err
	}
	n, err := b.DiscardDeadLetters(match)
	fmt.Fprintf(out, "discarded %s\n", count(n, "dead letter"))
	return errors.Join(err, b.Close())
}

func salvage(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("salvage", flag.ContinueOnError)
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	si, err := broker.Salvage(pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kept %d records (%d bytes), dropped %d bytes\n", si.Records, si.KeptBytes, si.DroppedBytes)
	if si.Resealed {
		fmt.Fprintf(out, "the cut fell inside the journal's snapshot: what was kept of it is sealed anew\n")
	}
	if si.Backup != "" {
		fmt.Fprintf(out, "the original is kept as %s\n", si.Backup)
	}
	for _, p := range si.SetAside {
		fmt.Fprintf(out, "set aside %s\n", p)
	}
	return nil
}

// copies serves the console over a copy of a directory, taken again for a
// request when the last is older than a second.
type copies struct {
	dir  string
	mu   sync.Mutex
	at   time.Time
	cons http.Handler
}

func (c *copies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	if c.cons == nil || time.Since(c.at) > time.Second {
		// A copy holds no goroutine or file: one no request uses any
		// more is garbage.
		b, err := openCopy(c.dir)
		if err != nil {
			c.mu.Unlock()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h, err := console.New(b, console.WithReadOnly(), console.WithTitle("leasebus · "+c.dir))
		if err != nil {
			c.mu.Unlock()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		c.cons, c.at = h, time.Now()
	}
	h := c.cons
	c.mu.Unlock()
	h.ServeHTTP(w, r)
}

func serveConsole(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on")
	write := fs.Bool("write", false, "take the lock and serve the console's actions (the owner must be stopped)")
	pos, err := parse(fs, args, "DIR")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var h http.Handler
	if *write {
		b, err := openLocked(pos[0])
		if err != nil {
			return err
		}
		defer b.Close()
		c, err := console.New(b, console.WithTitle("leasebus · "+pos[0]))
		if err != nil {
			return err
		}
		go c.Record(ctx) // the history while it serves (a copy, opened at each page, has none)
		h = c
	} else {
		c := &copies{dir: pos[0]}
		if _, err := openCopy(pos[0]); err != nil {
			return err // say so now, not at the first page
		}
		h = c
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "console: http://%s/\n", ln.Addr())
	srv := httpserve.New(h)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
