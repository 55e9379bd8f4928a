package webhook

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
)

// Names of the webhook's metrics.
const (
	// MetricDecisions counts answered admission reviews, labelled kind, operation,
	// subresource and result.
	MetricDecisions = "sandboxpool_webhook_decisions_total"
	// MetricDecisionDuration is a histogram of the time from reading a review to its
	// decision, labelled kind and operation.
	MetricDecisionDuration = "sandboxpool_webhook_decision_duration_seconds"
	// MetricMalformedReviews counts request bodies answered 400 (not an AdmissionReview
	// v1 with a request).
	MetricMalformedReviews = "sandboxpool_webhook_malformed_reviews_total"
)

// Label names and the values of the result label. The label values are bounded: a kind,
// operation or subresource the webhook does not serve is counted as labelOther.
const (
	labelKind        = "kind"
	labelOperation   = "operation"
	labelSubresource = "subresource"
	labelResult      = "result"

	ResultAllowed = "allowed"
	ResultDenied  = "denied"
	ResultError   = "error"

	labelOther = "other"
)

// durationBuckets reach from 100µs (a schema-only denial) to 2.5 s (beyond the API
// server's 5 s budget for the whole call only a timeout follows).
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
}

// metrics are the webhook's collectors.
type metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	malformed prometheus.Counter
}

// newMetrics registers the collectors on reg. A collector reg already holds (a second
// Handler in one process) is shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDecisions,
			Help: "Admission reviews answered, by kind, operation, subresource and result (allowed, denied, error).",
		}, []string{labelKind, labelOperation, labelSubresource, labelResult}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricDecisionDuration,
			Help:    "Time from reading an admission review to its decision, by kind and operation.",
			Buckets: durationBuckets,
		}, []string{labelKind, labelOperation}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricMalformedReviews,
			Help: "Request bodies answered 400: not an AdmissionReview v1 with a request.",
		}),
	}
	var err error
	if m.decisions, err = register(reg, m.decisions); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.malformed, err = register(reg, m.malformed); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("registering metrics: %w", err)
	}
	return c, nil
}

// observe records one decision.
func (m *metrics) observe(req *admissionv1.AdmissionRequest, result string, seconds float64) {
	kind, op := kindLabel(req.Kind.Kind), operationLabel(req.Operation)
	m.decisions.WithLabelValues(kind, op, subresourceLabel(req.SubResource), result).Inc()
	m.duration.WithLabelValues(kind, op).Observe(seconds)
}

func kindLabel(k string) string {
	if _, ok := kinds[k]; ok {
		return k
	}
	return labelOther
}

func operationLabel(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return string(op)
	}
	return labelOther
}

func subresourceLabel(sub string) string {
	if sub == "" || sub == statusSubresource {
		return sub
	}
	return labelOther
}

// resultLabel is the result label of a decision.
func resultLabel(allowed bool, err error) string {
	switch {
	case err != nil:
		return ResultError
	case allowed:
		return ResultAllowed
	}
	return ResultDenied
}
