package natsleasebus_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/leasebus/leasebus/natsleasebus"
)

// operatorStreams creates the bus's two streams by hand, as an operator
// would, with limits of their own.
func operatorStreams(t *testing.T, j js.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := j.CreateStream(ctx, js.StreamConfig{
		Name: defaultStream, Subjects: []string{"leasebus.topic.>", "leasebus.sub.>"},
		Retention: js.InterestPolicy, Storage: js.FileStorage,
		MaxAge: time.Hour, MaxBytes: 1 << 30,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.CreateStream(ctx, js.StreamConfig{
		Name: defaultStream + "_DLQ", Subjects: []string{"leasebus.dlq.>"},
		Storage: js.FileStorage, MaxAge: 24 * time.Hour, Duplicates: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
}

func streamConfig(t *testing.T, j js.JetStream, name string) js.StreamConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := j.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// TestOpenKeepsOperatorLimits: Open with no options binds to the streams
// an operator made as they are; it does not reset their limits.
func TestOpenKeepsOperatorLimits(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	operatorStreams(t, j)
	open(t, nc)
	if c := streamConfig(t, j, defaultStream); c.MaxAge != time.Hour || c.MaxBytes != 1<<30 {
		t.Errorf("after Open: stream MaxAge %v MaxBytes %d, want the operator's 1h and 1GiB", c.MaxAge, c.MaxBytes)
	}
	if c := streamConfig(t, j, defaultStream+"_DLQ"); c.MaxAge != 24*time.Hour || c.Duplicates != time.Minute {
		t.Errorf("after Open: DLQ stream MaxAge %v Duplicates %v, want the operator's 24h and 1m", c.MaxAge, c.Duplicates)
	}
}

// TestOpenRefusesWhatDiffers: options that disagree with the stream on the
// server make Open fail with a typed error naming the setting, and change
// nothing.
func TestOpenRefusesWhatDiffers(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	operatorStreams(t, j)
	for _, tc := range []struct {
		opt     natsleasebus.Option
		setting string
	}{
		{natsleasebus.WithMemoryStorage(), "Storage"},
		{natsleasebus.WithReplicas(3), "Replicas"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		_, err := natsleasebus.Open(ctx, nc, tc.opt)
		cancel()
		var mm *natsleasebus.ConfigMismatchError
		if !errors.As(err, &mm) || !errors.Is(err, natsleasebus.ErrConfigMismatch) {
			t.Fatalf("Open with %s differing: err = %v, want a *ConfigMismatchError", tc.setting, err)
		}
		if mm.Kind != "stream" || mm.Name != defaultStream || len(mm.Diffs) != 1 || mm.Diffs[0].Setting != tc.setting {
			t.Errorf("Open with %s differing: %+v", tc.setting, mm)
		}
	}
	if c := streamConfig(t, j, defaultStream); c.Storage != js.FileStorage || c.Replicas != 1 || c.MaxAge != time.Hour {
		t.Errorf("a refused Open changed the stream: %+v", c)
	}
}

// TestOpenBindsWhenOptionsAgree: explicit options that match what the
// server holds bind without a change, and a second Open with the options
// of the first is a no-op.
func TestOpenBindsWhenOptionsAgree(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	operatorStreams(t, j)
	open(t, nc, natsleasebus.WithMaxAge(time.Hour), natsleasebus.WithMaxBytes(1<<30), natsleasebus.WithReplicas(1))

	opts := []natsleasebus.Option{natsleasebus.WithStream("OTHER"), natsleasebus.WithSubjectPrefix("other"), natsleasebus.WithMemoryStorage(),
		natsleasebus.WithMaxMsgs(100), natsleasebus.WithDedupWindow(time.Minute)}
	open(t, nc, opts...)
	open(t, nc, opts...)
	c := streamConfig(t, j, "OTHER")
	if c.Storage != js.MemoryStorage || c.MaxMsgs != 100 || c.Duplicates != time.Minute || c.Retention != js.InterestPolicy || c.Discard != js.DiscardNew {
		t.Errorf("created stream: %+v", c)
	}
	if c := streamConfig(t, j, "OTHER_DLQ"); c.Storage != js.MemoryStorage || c.Duplicates != defaultDeadLetterDuplicates {
		t.Errorf("created dead-letter stream: %+v", c)
	}
}

// TestOpenUpdatesOnlyWhenAsked: WithUpdateStreams changes the settings the
// options name and keeps every other one the server holds; storage cannot
// change even then.
func TestOpenUpdatesOnlyWhenAsked(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	operatorStreams(t, j)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err = natsleasebus.Open(ctx, nc, natsleasebus.WithMaxAge(2*time.Hour), natsleasebus.WithMaxMsgs(500))
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || len(mm.Diffs) != 2 || mm.Diffs[0].Setting != "MaxAge" || mm.Diffs[1].Setting != "MaxMsgs" ||
		mm.Diffs[0].Server != "1h0m0s" || mm.Diffs[0].Requested != "2h0m0s" || mm.Diffs[0].Option != "WithMaxAge" {
		t.Fatalf("Open with MaxAge and MaxMsgs differing: %v (%+v)", err, mm)
	}
	t.Log(err)
	open(t, nc, natsleasebus.WithMaxAge(2*time.Hour), natsleasebus.WithMaxMsgs(500), natsleasebus.WithUpdateStreams())
	c := streamConfig(t, j, defaultStream)
	if c.MaxAge != 2*time.Hour || c.MaxMsgs != 500 || c.MaxBytes != 1<<30 || c.Storage != js.FileStorage {
		t.Errorf("after the update: MaxAge %v MaxMsgs %d MaxBytes %d Storage %v, want 2h, 500, the operator's 1GiB, file", c.MaxAge, c.MaxMsgs, c.MaxBytes, c.Storage)
	}
	if c := streamConfig(t, j, defaultStream+"_DLQ"); c.MaxAge != 24*time.Hour {
		t.Errorf("the update changed the dead-letter stream's MaxAge: %v", c.MaxAge)
	}
	_, err = natsleasebus.Open(ctx, nc, natsleasebus.WithMemoryStorage(), natsleasebus.WithUpdateStreams())
	if !errors.As(err, &mm) || !mm.Diffs[0].Fixed {
		t.Fatalf("Open changing the storage with an update: %v, want a mismatch marked Fixed", err)
	}
}

// TestOpenNeedsItsSubjects: a stream of the bus's name that does not take
// its subjects, or keeps messages under limits retention, is refused; an
// update adds the subject and keeps the others.
func TestOpenNeedsItsSubjects(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.srv.ClientURL())
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := j.CreateStream(ctx, js.StreamConfig{Name: defaultStream, Subjects: []string{"audit.>"}, Retention: js.InterestPolicy}); err != nil {
		t.Fatal(err)
	}
	_, err = natsleasebus.Open(ctx, nc)
	var mm *natsleasebus.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Diffs[0].Setting != "Subjects" || mm.Diffs[0].Option != "required" {
		t.Fatalf("Open on a stream without its subjects: %v", err)
	}
	open(t, nc, natsleasebus.WithUpdateStreams())
	if c := streamConfig(t, j, defaultStream); !slices.Equal(c.Subjects, []string{"audit.>", "leasebus.topic.>", "leasebus.sub.>"}) {
		t.Errorf("subjects after the update: %q", c.Subjects)
	}
	// The dead-letter stream was missing: created.
	streamConfig(t, j, defaultStream+"_DLQ")

	if _, err := j.CreateStream(ctx, js.StreamConfig{Name: "LIMITS", Subjects: []string{"lim.topic.>", "lim.sub.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err = natsleasebus.Open(ctx, nc, natsleasebus.WithStream("LIMITS"), natsleasebus.WithSubjectPrefix("lim"))
	if !errors.As(err, &mm) || mm.Diffs[0].Setting != "Retention" {
		t.Fatalf("Open on a limits stream: %v", err)
	}
	// A stream whose subjects cover the bus's with a wider wildcard is fine.
	if _, err := j.CreateStream(ctx, js.StreamConfig{Name: "WIDE", Subjects: []string{"acme.*.topic.>", "acme.*.sub.>"}, Retention: js.InterestPolicy}); err != nil {
		t.Fatal(err)
	}
	open(t, nc, natsleasebus.WithStream("WIDE"), natsleasebus.WithSubjectPrefix("acme.wide"))
}

// TestOpenJetStreamDomain runs a round trip on a bus opened with a
// JetStream context of a domain, as a leaf node's client would.
func TestOpenJetStreamDomain(t *testing.T) {
	srv := startServerWith(t, t.TempDir(), -1, func(o *server.Options) { o.JetStreamDomain = "hub" })
	nc := connect(t, srv.srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for _, mk := range []func() (js.JetStream, error){
		func() (js.JetStream, error) { return js.NewWithDomain(nc, "hub") },
		func() (js.JetStream, error) { return js.NewWithAPIPrefix(nc, "$JS.hub.API") },
	} {
		j, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		bus, err := natsleasebus.OpenJetStream(ctx, j, natsleasebus.WithMemoryStorage())
		if err != nil {
			t.Fatal(err)
		}
		sub, err := natsleasebus.Subscribe[string](ctx, bus, "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := natsleasebus.Publish(ctx, bus, "orders", "o1"); err != nil {
			t.Fatal(err)
		}
		ds, err := sub.Poll(ctx, 1)
		if err != nil || len(ds) != 1 || ds[0].Payload != "o1" {
			t.Fatalf("Poll: %v %v", ds, err)
		}
		if err := sub.Ack(ds[0].LeaseID); err != nil {
			t.Fatal(err)
		}
		sub.Close()
	}
	if _, err := natsleasebus.OpenJetStream(ctx, nil); err == nil {
		t.Fatal("OpenJetStream(nil) succeeded")
	}
}
