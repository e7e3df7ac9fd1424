// Command prometheus runs a small worker pool instrumented with
// otelleasebus: it sends welcome emails for five signups (one fails once
// and is retried, one is poison and dead-lettered), serves the pool's
// metrics on a Prometheus endpoint through the OpenTelemetry Prometheus
// exporter, and prints the trace of every signup as a tree.
//
//	go run ./otelleasebus/examples/prometheus                 # run, print the tree and the scrape, exit
//	go run ./otelleasebus/examples/prometheus -serve          # then keep serving http://localhost:9464/metrics
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/broker"
	"github.com/leasebus/leasebus/otelleasebus"
	"github.com/leasebus/leasebus/poller"
	"github.com/leasebus/leasebus/queue"
)

func main() {
	addr := flag.String("addr", "localhost:9464", "address to serve /metrics on")
	serve := flag.Bool("serve", false, "keep serving /metrics after the run, until interrupted")
	flag.Parse()
	if err := realMain(*addr, *serve, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func realMain(addr string, serve bool, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	tel, err := newTelemetry()
	if err != nil {
		return err
	}
	defer tel.shutdown()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := httpServer(tel.metricsHandler())
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at Close
	defer srv.Close()

	closeBroker, err := run(ctx, tel, out)
	if err != nil {
		return err
	}
	defer closeBroker()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "\nmetrics at %s (the pool's counters):\n", url)
	if err := printScrape(ctx, out, url); err != nil {
		return err
	}
	if serve {
		fmt.Fprintln(out, "serving; interrupt to stop")
		<-ctx.Done()
	}
	return nil
}

// telemetry is the program's OpenTelemetry setup: a MeterProvider read by
// the Prometheus exporter into its own registry, and a TracerProvider whose
// spans are kept for the tree.
type telemetry struct {
	registry *prometheus.Registry
	mp       *sdkmetric.MeterProvider
	tp       *sdktrace.TracerProvider
	spans    *treeRecorder
}

func newTelemetry() (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	spans := &treeRecorder{}
	return &telemetry{
		registry: reg,
		mp:       sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		tp:       sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		spans:    spans,
	}, nil
}

func (t *telemetry) shutdown() {
	_ = t.mp.Shutdown(context.Background())
	_ = t.tp.Shutdown(context.Background())
}

// metricsHandler serves the registry, as Prometheus scrapes it.
func (t *telemetry) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{}))
	return mux
}

// Signup is the payload: a user to welcome.
type Signup struct{ User string }

// smtpError is a mail server's refusal. Its ErrorType is the error.type
// the spans and metrics carry.
type smtpError struct{ Code int }

func (e smtpError) Error() string     { return fmt.Sprintf("smtp: %d", e.Code) }
func (e smtpError) ErrorType() string { return fmt.Sprintf("smtp_%d", e.Code) }

// run publishes the signups, runs the pool until every one is handled, and
// prints the trace tree. The broker stays open, its statistics observed,
// until closeBroker is called.
func run(ctx context.Context, tel *telemetry, out io.Writer) (closeBroker func(), err error) {
	b, err := broker.New[Signup](
		broker.WithSubscriptionDefaults(broker.WithMaxAttempts(3), broker.WithRetry(queue.RetryPolicy{Initial: 5 * time.Millisecond})))
	if err != nil {
		return nil, err
	}
	var reg metric.Registration
	closeBroker = func() {
		if reg != nil {
			_ = reg.Unregister()
		}
		_ = b.Close()
	}
	defer func() {
		if err != nil {
			closeBroker()
		}
	}()
	if err := b.CreateTopic("signups"); err != nil {
		return nil, err
	}
	sub, err := b.Subscribe("signups", "welcome-emails")
	if err != nil {
		return nil, err
	}

	// The instrumentation: the subscription's statistics, the publisher,
	// and the pool's middleware.
	opts := []otelleasebus.Option{
		otelleasebus.WithMeterProvider(tel.mp),
		otelleasebus.WithTracerProvider(tel.tp),
		otelleasebus.WithPublisherAsParent(), // one trace per signup, shown as a tree
	}
	if reg, err = otelleasebus.ObserveSubscription(sub, opts...); err != nil {
		return nil, err
	}
	pub, err := otelleasebus.NewPublisher(b, opts...)
	if err != nil {
		return nil, err
	}
	mw, err := otelleasebus.NewMiddleware(sub, opts...)
	if err != nil {
		return nil, err
	}

	tracer := tel.tp.Tracer("example")
	for _, user := range []string{"alice", "bob", "carol", "dave", "mallory"} {
		ctx, span := tracer.Start(ctx, "signup "+user)
		_, err := pub.Publish(ctx, "signups", Signup{User: user})
		span.End()
		if err != nil {
			return nil, err
		}
	}

	send := func(ctx context.Context, d queue.Delivery[Signup]) error {
		_, span := tracer.Start(ctx, "send welcome email", trace.WithAttributes(attribute.String("user", d.Payload.User)))
		defer span.End()
		switch {
		case d.Payload.User == "bob" && d.Attempt == 1:
			return smtpError{Code: 451} // greylisted: try again later
		case d.Payload.User == "mallory":
			return poller.GiveUp(smtpError{Code: 550}) // no such mailbox: never retry
		}
		return nil
	}
	p, err := poller.New(sub, mw.Handler(send), mw.Observer(), poller.WithWorkers(2))
	if err != nil {
		return nil, err
	}
	if err := p.RunUntilIdle(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "traces:")
	tel.spans.print(out)
	return closeBroker, nil
}

// shown are the series printScrape prints (the rest, and the buckets and
// sums of the histograms, depend on timing), and hidden the labels it
// leaves out, the same on every series here.
var (
	shown = []string{"leasebus_", "messaging_client_sent_", "messaging_client_consumed_",
		"messaging_client_operation_duration_seconds_count", "messaging_process_duration_seconds_count"}
	hidden = []string{"otel_scope_name", "otel_scope_schema_url", "otel_scope_version", "messaging_system",
		"messaging_destination_name", "messaging_consumer_group_name", "messaging_destination_subscription_name",
		"messaging_operation_name", "messaging_operation_type"}
)

// printScrape fetches url and prints the series of the pool, its
// subscription and its publisher, less the labels they all share.
func printScrape(ctx context.Context, out io.Writer, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Close = true // one request: leave no idle connection behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("scrape: " + resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !slices.ContainsFunc(shown, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		fmt.Fprintln(out, "  "+trimLabels(line))
	}
	return sc.Err()
}

// trimLabels removes the hidden labels from a series line of the text
// format, name{k="v",...} value (label values here hold no comma or
// brace).
func trimLabels(line string) string {
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || end < open {
		return line
	}
	var kept []string
	for _, l := range strings.Split(line[open+1:end], ",") {
		name, _, _ := strings.Cut(l, "=")
		if !slices.Contains(hidden, name) {
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		return line[:open] + line[end+1:]
	}
	return line[:open] + "{" + strings.Join(kept, ",") + "}" + line[end+1:]
}

// httpServer returns a server for h whose every stage of a connection is
// bounded: a client that stalls in its headers or its body, reads its
// answer too slowly or idles loses the connection.
func httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}
