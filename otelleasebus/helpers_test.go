package otelleasebus_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasebus/leasebus/otelleasebus"
)

// hangGuard bounds every wait, so that a bug fails a test rather than
// hanging it. It is never a timing assertion.
const hangGuard = 30 * time.Second

// telemetry is an SDK MeterProvider with a manual reader and a
// TracerProvider with a span recorder, both shut down when the test ends.
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		_ = tel.mp.Shutdown(context.Background())
		_ = tel.tp.Shutdown(context.Background())
	})
	return tel
}

// options are the options that point this package at tel.
func (tel *telemetry) options(more ...otelleasebus.Option) []otelleasebus.Option {
	return append([]otelleasebus.Option{
		otelleasebus.WithMeterProvider(tel.mp),
		otelleasebus.WithTracerProvider(tel.tp),
	}, more...)
}

// collect reads every metric and flattens it to one line per data point:
// "name{k=v,...}" (attributes sorted) to its value: an integer or a float
// for sums and gauges, "count=N sum=S" for histograms.
func (tel *telemetry) collect(t *testing.T) map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	return flatten(t, rm)
}

func flatten(t *testing.T, rm metricdata.ResourceMetrics) map[string]string {
	t.Helper()
	out := map[string]string{}
	put := func(name string, set attribute.Set, v string) {
		k := name + "{" + attrString(set) + "}"
		if _, dup := out[k]; dup {
			t.Errorf("two data points for %s", k)
		}
		out[k] = v
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelleasebus.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelleasebus.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, fmt.Sprintf("count=%d sum=%v", p.Count, p.Sum))
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func attrString(set attribute.Set) string {
	parts := make([]string, 0, set.Len())
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

// only keeps the points whose name starts with prefix.
func only(points map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range points {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// equalPoints fails the test unless got and want hold the same points.
func equalPoints(t *testing.T, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s = %s", k, want[k])
		} else if g != want[k] {
			t.Errorf("%s = %s, want %s", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %s", k, got[k])
		}
	}
}

// attrs returns a span's attributes as strings, by key.
func attrs(kvs []attribute.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// equalAttrs fails the test unless the span's attributes are exactly want.
func equalAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	g := attrs(got)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g[k] != want[k] {
			t.Errorf("%s: %s = %q, want %q", what, k, g[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %q", what, k, g[k])
		}
	}
}
