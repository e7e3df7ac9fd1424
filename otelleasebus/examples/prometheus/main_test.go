package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program's whole output: the trace tree of every signup and the
// pool's series as its own endpoint serves them. Only the port varies.
func TestOutput(t *testing.T) {
	var out bytes.Buffer
	if err := realMain("127.0.0.1:0", false, &out); err != nil {
		t.Fatal(err)
	}
	got := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).ReplaceAllString(out.String(), "http://ADDR/")
	if got != wantOutput {
		t.Errorf("output:\n%s\nwant:\n%s", got, wantOutput)
	}
}

const wantOutput = `traces:
signup alice
└─ publish signups (producer)
   └─ process signups (consumer) attempt=1 outcome=acked
      └─ send welcome email
signup bob
└─ publish signups (producer)
   ├─ process signups (consumer) attempt=1 outcome=retried error=smtp_451
   │  └─ send welcome email
   └─ process signups (consumer) attempt=2 outcome=acked
      └─ send welcome email
signup carol
└─ publish signups (producer)
   └─ process signups (consumer) attempt=1 outcome=acked
      └─ send welcome email
signup dave
└─ publish signups (producer)
   └─ process signups (consumer) attempt=1 outcome=acked
      └─ send welcome email
signup mallory
└─ publish signups (producer)
   └─ process signups (consumer) attempt=1 outcome=dead-lettered error=smtp_550
      └─ send welcome email

metrics at http://ADDR/metrics (the pool's counters):
  leasebus_poller_outcomes_total{leasebus_outcome="acked"} 4
  leasebus_poller_outcomes_total{leasebus_outcome="dead-lettered"} 1
  leasebus_poller_outcomes_total{leasebus_outcome="retried"} 1
  leasebus_subscription_acked_total 4
  leasebus_subscription_dead_lettered_total{leasebus_dead_letter_reason="cancelled"} 0
  leasebus_subscription_dead_lettered_total{leasebus_dead_letter_reason="expired"} 0
  leasebus_subscription_dead_lettered_total{leasebus_dead_letter_reason="max-attempts"} 0
  leasebus_subscription_dead_lettered_total{leasebus_dead_letter_reason="overflow"} 0
  leasebus_subscription_dead_lettered_total{leasebus_dead_letter_reason="rejected"} 1
  leasebus_subscription_delivered_total 6
  leasebus_subscription_dropped_total 0
  leasebus_subscription_limited 0
  leasebus_subscription_messages{leasebus_message_state="delayed"} 0
  leasebus_subscription_messages{leasebus_message_state="held_back"} 0
  leasebus_subscription_messages{leasebus_message_state="in_flight"} 0
  leasebus_subscription_messages{leasebus_message_state="visible"} 0
  leasebus_subscription_oldest_visible_age_seconds 0
  leasebus_subscription_published_total 5
  leasebus_subscription_redelivered_total 1
  leasebus_subscription_redriven_total 0
  leasebus_subscription_rejected_total 0
  messaging_client_consumed_messages_total 6
  messaging_client_operation_duration_seconds_count 5
  messaging_client_sent_messages_total 5
  messaging_process_duration_seconds_count{leasebus_outcome="acked"} 4
  messaging_process_duration_seconds_count{error_type="smtp_451",leasebus_outcome="retried"} 1
  messaging_process_duration_seconds_count{error_type="smtp_550",leasebus_outcome="dead-lettered"} 1
`

// The endpoint, scraped through an httptest server and parsed as
// Prometheus parses it: the metric names, types, labels and values.
func TestScrape(t *testing.T) {
	tel, err := newTelemetry()
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown()
	var trees bytes.Buffer
	closeBroker, err := run(context.Background(), tel, &trees)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBroker()
	srv := httptest.NewServer(tel.metricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	sub := map[string]string{
		"messaging_system":                        "leasebus",
		"messaging_destination_name":              "signups",
		"messaging_consumer_group_name":           "welcome-emails",
		"messaging_destination_subscription_name": "welcome-emails",
		"otel_scope_name":                         "github.com/leasebus/leasebus/otelleasebus",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range sub {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	process := with("messaging_operation_name", "process")
	cases := []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		value  float64 // a histogram's count
	}{
		{"leasebus_subscription_published_total", dto.MetricType_COUNTER, sub, 5},
		{"leasebus_subscription_delivered_total", dto.MetricType_COUNTER, sub, 6},
		{"leasebus_subscription_acked_total", dto.MetricType_COUNTER, sub, 4},
		{"leasebus_subscription_redelivered_total", dto.MetricType_COUNTER, sub, 1},
		{"leasebus_subscription_dead_lettered_total", dto.MetricType_COUNTER, with("leasebus_dead_letter_reason", "rejected"), 1},
		{"leasebus_subscription_dead_lettered_total", dto.MetricType_COUNTER, with("leasebus_dead_letter_reason", "max-attempts"), 0},
		{"leasebus_subscription_dropped_total", dto.MetricType_COUNTER, sub, 0},
		{"leasebus_subscription_messages", dto.MetricType_GAUGE, with("leasebus_message_state", "visible"), 0},
		{"leasebus_subscription_messages", dto.MetricType_GAUGE, with("leasebus_message_state", "in_flight"), 0},
		{"leasebus_subscription_oldest_visible_age_seconds", dto.MetricType_GAUGE, sub, 0},
		{"leasebus_poller_outcomes_total", dto.MetricType_COUNTER, with("messaging_operation_name", "process", "leasebus_outcome", "acked"), 4},
		{"leasebus_poller_outcomes_total", dto.MetricType_COUNTER, with("messaging_operation_name", "process", "leasebus_outcome", "retried"), 1},
		{"messaging_client_consumed_messages_total", dto.MetricType_COUNTER, process, 6},
		{"messaging_process_duration_seconds", dto.MetricType_HISTOGRAM, with("messaging_operation_name", "process", "leasebus_outcome", "acked"), 4},
		{"messaging_process_duration_seconds", dto.MetricType_HISTOGRAM, with("messaging_operation_name", "process", "leasebus_outcome", "dead-lettered", "error_type", "smtp_550"), 1},
		{"messaging_client_sent_messages_total", dto.MetricType_COUNTER, map[string]string{
			"messaging_system": "leasebus", "messaging_destination_name": "signups",
			"messaging_operation_name": "publish", "messaging_operation_type": "send",
			"otel_scope_name": "github.com/leasebus/leasebus/otelleasebus"}, 5},
	}
	for _, c := range cases {
		f := families[c.name]
		if f == nil {
			t.Errorf("%s: not served", c.name)
			continue
		}
		if f.GetType() != c.typ {
			t.Errorf("%s: type %v, want %v", c.name, f.GetType(), c.typ)
		}
		m := find(f, c.labels)
		if m == nil {
			t.Errorf("%s: no series with labels %v", c.name, c.labels)
			continue
		}
		var v float64
		switch c.typ {
		case dto.MetricType_COUNTER:
			v = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v = m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			v = float64(m.GetHistogram().GetSampleCount())
		}
		if v != c.value {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.value)
		}
	}
}

// find returns the series of f whose labels include want and nothing else
// but the scope's version and schema URL.
func find(f *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range f.GetMetric() {
		ok, n := true, 0
		for _, l := range m.GetLabel() {
			v, named := want[l.GetName()]
			switch {
			case named && v == l.GetValue():
				n++
			case named:
				ok = false
			case l.GetName() != "otel_scope_version" && l.GetName() != "otel_scope_schema_url":
				ok = false
			}
		}
		if ok && n == len(want) {
			return m
		}
	}
	return nil
}
