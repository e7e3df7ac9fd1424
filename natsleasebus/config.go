package natsleasebus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	js "github.com/nats-io/nats.go/jetstream"
)

// ErrConfigMismatch is matched (errors.Is) by every *ConfigMismatchError.
var ErrConfigMismatch = errors.New("natsleasebus: configuration on the server differs")

// ConfigMismatchError is returned by Open and Subscribe when the stream or
// consumer already exists on the server and a setting the caller asked for
// explicitly (or one leasebus needs) differs from what the server holds.
// Nothing was changed. To adopt the server's settings, leave those options
// out; to change the server's, pass WithUpdateStreams (Open) or
// WithUpdateConsumer (Subscribe) — except for settings JetStream cannot
// change in place (Diff.Fixed).
type ConfigMismatchError struct {
	Kind  string // "stream" or "consumer"
	Name  string // the stream's or the consumer's name
	Diffs []Diff // the settings that differ, at least one
}

// Diff is one setting that differs between the server and the options.
type Diff struct {
	Setting   string // the JetStream configuration field, e.g. "MaxAge", "Replicas", "AckWait"
	Option    string // the option that asked for it, or "required" for one leasebus needs
	Server    string // the value on the server
	Requested string // the value asked for
	Fixed     bool   // JetStream cannot change it in place, even with an update
}

// Error says what differs and what to do.
func (e *ConfigMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "natsleasebus: %s %s exists with other settings:", e.Kind, e.Name)
	fixed := false
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s is %s on the server, %s asks for %s", d.Setting, d.Server, d.Option, d.Requested)
		if d.Fixed {
			b.WriteString(" (cannot be changed in place)")
			fixed = true
		}
	}
	switch {
	case fixed:
		b.WriteString("; nothing changed: drop the option, or recreate the " + e.Kind)
	case e.Kind == "consumer":
		b.WriteString("; nothing changed: drop the option to bind as it is, or pass WithUpdateConsumer to change it")
	default:
		b.WriteString("; nothing changed: drop the option to bind as it is, or pass WithUpdateStreams to change it")
	}
	return b.String()
}

// Is reports whether target is ErrConfigMismatch.
func (e *ConfigMismatchError) Is(target error) bool { return target == ErrConfigMismatch }

// setting is one field of a configuration C that Open or Subscribe
// compares with the server's and, on an explicit update, copies.
type setting[C any] struct {
	name   string // the JetStream field
	option string // the option that sets it, or "required"
	fixed  bool   // the server cannot change it in place
	equal  func(have, want *C) bool
	show   func(c *C) string
	copy   func(dst, src *C)
}

// field is a setting for a comparable field of C.
func field[C any, V comparable](name, option string, p func(*C) *V) setting[C] {
	return setting[C]{
		name: name, option: option,
		equal: func(h, w *C) bool { return *p(h) == *p(w) },
		show:  func(c *C) string { return fmt.Sprint(*p(c)) },
		copy:  func(d, s *C) { *p(d) = *p(s) },
	}
}

// settings is the set of settings a caller asked for explicitly, each
// once (the last option given wins).
type settings[C any] []setting[C]

func (ss *settings[C]) add(s setting[C]) {
	*ss = slices.DeleteFunc(*ss, func(o setting[C]) bool { return o.name == s.name })
	*ss = append(*ss, s)
}

// diff returns the settings of ss on which have and want differ.
func (ss settings[C]) diff(have, want *C) []Diff {
	var out []Diff
	for _, s := range ss {
		if !s.equal(have, want) {
			out = append(out, Diff{Setting: s.name, Option: s.option, Server: s.show(have), Requested: s.show(want), Fixed: s.fixed})
		}
	}
	return out
}

// apply copies the settings of ss from want to have.
func (ss settings[C]) apply(have, want *C) {
	for _, s := range ss {
		s.copy(have, want)
	}
}

func anyFixed(ds []Diff) bool {
	return slices.ContainsFunc(ds, func(d Diff) bool { return d.Fixed })
}

// kind is how ensure reaches one kind of server object (a stream or a
// consumer) with configuration C and handle R.
type kind[C, R any] struct {
	name     string                                   // "stream" or "consumer"
	get      func(context.Context, string) (R, error) // by name
	create   func(context.Context, C) (R, error)
	update   func(context.Context, C) (R, error)
	config   func(R) C // the configuration the handle was read with
	notFound error     // what get returns for a missing object
	exists   error     // what create returns when another made it first
}

// ensure returns the object named name: created from want if it is
// missing, bound as it is if the settings in needs agree, updated (those
// settings only) if update is set, else refused with a *ConfigMismatchError.
func ensure[C, R any](ctx context.Context, k kind[C, R], name string, want C, needs settings[C], update bool) (R, error) {
	var zero R
	obj, err := k.get(ctx, name)
	if errors.Is(err, k.notFound) {
		obj, err = k.create(ctx, want)
		if err == nil {
			return obj, nil
		}
		if !errors.Is(err, k.exists) {
			return zero, fmt.Errorf("create %s %s: %w", k.name, name, err)
		}
		obj, err = k.get(ctx, name) // created meanwhile by another handle
	}
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", k.name, name, err)
	}
	have := k.config(obj)
	diffs := needs.diff(&have, &want)
	if len(diffs) == 0 {
		return obj, nil
	}
	if !update || anyFixed(diffs) {
		return zero, &ConfigMismatchError{Kind: k.name, Name: name, Diffs: diffs}
	}
	needs.apply(&have, &want)
	obj, err = k.update(ctx, have)
	if err != nil {
		return zero, fmt.Errorf("update %s %s: %w", k.name, name, err)
	}
	return obj, nil
}

// ensureStream is ensure for a stream of j.
func ensureStream(ctx context.Context, j js.JetStream, want js.StreamConfig, needs settings[js.StreamConfig], update bool) (js.Stream, error) {
	return ensure(ctx, kind[js.StreamConfig, js.Stream]{
		name: "stream", get: j.Stream, create: j.CreateStream, update: j.UpdateStream,
		config:   func(st js.Stream) js.StreamConfig { return st.CachedInfo().Config },
		notFound: js.ErrStreamNotFound, exists: js.ErrStreamNameAlreadyInUse,
	}, want.Name, want, needs, update)
}

// ensureConsumer is ensure for a durable consumer on st.
func ensureConsumer(ctx context.Context, st js.Stream, want js.ConsumerConfig, needs settings[js.ConsumerConfig], update bool) (js.Consumer, error) {
	return ensure(ctx, kind[js.ConsumerConfig, js.Consumer]{
		name: "consumer", get: st.Consumer, create: st.CreateConsumer, update: st.UpdateConsumer,
		config:   func(c js.Consumer) js.ConsumerConfig { return c.CachedInfo().Config },
		notFound: js.ErrConsumerNotFound, exists: js.ErrConsumerExists,
	}, want.Durable, want, needs, update)
}
