package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// treeRecorder is a SpanProcessor that keeps every ended span, to print
// them as trees: parents above children, each level in the order the spans
// started.
type treeRecorder struct {
	mu      sync.Mutex           // guards everything below
	started map[trace.SpanID]int // start order
	ended   []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*treeRecorder)(nil)

func (r *treeRecorder) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started == nil {
		r.started = map[trace.SpanID]int{}
	}
	r.started[s.SpanContext().SpanID()] = len(r.started)
}

func (r *treeRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, s)
}

func (r *treeRecorder) Shutdown(context.Context) error   { return nil }
func (r *treeRecorder) ForceFlush(context.Context) error { return nil }

// print writes the ended spans as trees. A span whose parent did not end
// here is a root.
func (r *treeRecorder) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range r.ended {
		byID[s.SpanContext().SpanID()] = s
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range r.ended {
		if _, ok := byID[s.Parent().SpanID()]; ok && s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(spans []sdktrace.ReadOnlySpan) {
		for i := range spans { // insertion sort by start order: a few spans each
			for j := i; j > 0 && r.started[spans[j].SpanContext().SpanID()] < r.started[spans[j-1].SpanContext().SpanID()]; j-- {
				spans[j], spans[j-1] = spans[j-1], spans[j]
			}
		}
	}
	var walk func(s sdktrace.ReadOnlySpan, prefix, branch, indent string)
	walk = func(s sdktrace.ReadOnlySpan, prefix, branch, indent string) {
		fmt.Fprintln(w, prefix+branch+describe(s))
		kids := children[s.SpanContext().SpanID()]
		order(kids)
		for i, k := range kids {
			if i == len(kids)-1 {
				walk(k, prefix+indent, "└─ ", "   ")
			} else {
				walk(k, prefix+indent, "├─ ", "│  ")
			}
		}
	}
	order(roots)
	for _, s := range roots {
		walk(s, "", "", "")
	}
}

// describe is a span's line: its name, its kind when it is a messaging
// one, and the attributes that tell a delivery's story.
func describe(s sdktrace.ReadOnlySpan) string {
	parts := []string{s.Name()}
	if k := s.SpanKind(); k == trace.SpanKindProducer || k == trace.SpanKindConsumer {
		parts = append(parts, "("+k.String()+")")
	}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case "leasebus.message.delivery_attempt":
			parts = append(parts, "attempt="+kv.Value.String())
		case "leasebus.outcome":
			parts = append(parts, "outcome="+kv.Value.String())
		case "error.type":
			parts = append(parts, "error="+kv.Value.String())
		}
	}
	for _, l := range s.Links() {
		parts = append(parts, "link="+l.SpanContext.SpanID().String())
	}
	return strings.Join(parts, " ")
}
