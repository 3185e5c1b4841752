package distlock

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The Client's OpenTelemetry instruments: the package doc's Metrics
// section lists their names, units and attributes, which are part of the
// API (dashboards depend on them). Attribute sets are made once, when the
// Client is created (see TestMetricsAllocs).

const instrumentationName = "github.com/distlock/distlock"

// secondsBuckets are the histograms' default buckets, in seconds: the
// SDK's own defaults are meant for milliseconds, and every measurement
// would fall in their first bucket.
var secondsBuckets = metric.WithExplicitBucketBoundaries(
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

// Attribute values of the instruments.
type (
	acquireOutcome int
	holdOutcome    int
	renewalOutcome int
	lossReason     int
)

const (
	acquired acquireOutcome = iota
	heldElsewhere
	timedOut
	canceled
	acquireFailed
	nAcquireOutcomes
)

const (
	released holdOutcome = iota
	lost
	maxHold
	closedByClient
	nHoldOutcomes
)

const (
	renewedOK renewalOutcome = iota
	renewalFailed
	renewalLost
	nRenewalOutcomes
)

const (
	lossDeadline lossReason = iota
	lossServiceReported
	lossRevoked
	lossMaxHold
	nLossReasons
)

var (
	acquireOutcomeNames = [nAcquireOutcomes]string{"acquired", "not_acquired", "timeout", "canceled", "error"}
	holdOutcomeNames    = [nHoldOutcomes]string{"released", "lost", "max_hold", "closed"}
	renewalOutcomeNames = [nRenewalOutcomes]string{"ok", "failed", "lost"}
	lossReasonNames     = [nLossReasons]string{"deadline", "service_reported", "revoked", "max_hold"}
)

// metrics holds the instruments and, for each attribute value, the options
// that record it.
type metrics struct {
	acquire  metric.Float64Histogram
	hold     metric.Float64Histogram
	held     metric.Int64UpDownCounter
	waiters  metric.Int64UpDownCounter
	renewals metric.Int64Counter
	headroom metric.Float64Histogram
	losses   metric.Int64Counter

	backend  attribute.KeyValue
	keyLabel func(key string) string

	acquireOpts [nAcquireOutcomes][]metric.RecordOption
	holdOpts    [nHoldOutcomes][]metric.RecordOption
	renewalOpts [nRenewalOutcomes][]metric.AddOption
	lossOpts    [nLossReasons][]metric.AddOption
	baseAdd     []metric.AddOption
	baseRecord  []metric.RecordOption
}

// backendName is the package name of b's type: its distlock.backend
// attribute.
func backendName(b driver.Backend) string {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	if p == "" {
		return "unknown"
	}
	return p
}

func newMetrics(mp metric.MeterProvider, backend string, keyLabel func(string) string) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	ms := &metrics{backend: attribute.String("distlock.backend", backend), keyLabel: keyLabel}
	var err error
	ms.acquire, err = m.Float64Histogram("distlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an acquisition took, granted or not."), secondsBuckets)
	add(err)
	ms.hold, err = m.Float64Histogram("distlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, from its grant to its end."), secondsBuckets)
	add(err)
	ms.held, err = m.Int64UpDownCounter("distlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held by the Client."))
	add(err)
	ms.waiters, err = m.Int64UpDownCounter("distlock.waiters", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions waiting for a lock."))
	add(err)
	ms.renewals, err = m.Int64Counter("distlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("driver.Lease renewals, by outcome."))
	add(err)
	ms.headroom, err = m.Float64Histogram("distlock.lease.headroom", metric.WithUnit("s"),
		metric.WithDescription("Time left before the local deadline when a renewal was confirmed."), secondsBuckets)
	add(err)
	ms.losses, err = m.Int64Counter("distlock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Locks lost, by reason."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	set := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{ms.backend}, kv...)...))
	}
	base := set()
	ms.baseAdd, ms.baseRecord = []metric.AddOption{base}, []metric.RecordOption{base}
	for i, n := range acquireOutcomeNames {
		ms.acquireOpts[i] = []metric.RecordOption{set(attribute.String("outcome", n))}
	}
	for i, n := range holdOutcomeNames {
		ms.holdOpts[i] = []metric.RecordOption{set(attribute.String("outcome", n))}
	}
	for i, n := range renewalOutcomeNames {
		ms.renewalOpts[i] = []metric.AddOption{set(attribute.String("outcome", n))}
	}
	for i, n := range lossReasonNames {
		ms.lossOpts[i] = []metric.AddOption{set(attribute.String("reason", n))}
	}
	ms.zero()
	return ms, nil
}

// zero adds 0 to every counter, for each attribute value it takes, so that
// its series exist from the start: an alert on losses sees 0, not "no
// data". With a key label the labels are not known in advance; the zero
// series then carry none. Histograms have no zero: a measurement is an
// event (their series appear with the first).
func (ms *metrics) zero() {
	ms.held.Add(bg, 0, ms.baseAdd...)
	ms.waiters.Add(bg, 0, ms.baseAdd...)
	for _, o := range ms.renewalOpts {
		ms.renewals.Add(bg, 0, o...)
	}
	for _, o := range ms.lossOpts {
		ms.losses.Add(bg, 0, o...)
	}
}

// withKey adds the key's label, if there is one, to a measurement's
// attributes, in a set made for the measurement.
func (ms *metrics) withKey(key string, kv attribute.KeyValue) metric.MeasurementOption {
	attrs := []attribute.KeyValue{ms.backend, attribute.String("distlock.key.label", ms.keyLabel(key))}
	if kv.Valid() {
		attrs = append(attrs, kv)
	}
	return metric.WithAttributeSet(attribute.NewSet(attrs...))
}

var bg = context.Background()

func (ms *metrics) acquired(key string, o acquireOutcome, d time.Duration) {
	if ms.keyLabel != nil {
		ms.acquire.Record(bg, d.Seconds(), ms.withKey(key, attribute.String("outcome", acquireOutcomeNames[o])))
		return
	}
	ms.acquire.Record(bg, d.Seconds(), ms.acquireOpts[o]...)
}

func (ms *metrics) ended(key string, o holdOutcome, held time.Duration) {
	if ms.keyLabel != nil {
		ms.hold.Record(bg, held.Seconds(), ms.withKey(key, attribute.String("outcome", holdOutcomeNames[o])))
		ms.held.Add(bg, -1, ms.withKey(key, attribute.KeyValue{}))
		return
	}
	ms.hold.Record(bg, held.Seconds(), ms.holdOpts[o]...)
	ms.held.Add(bg, -1, ms.baseAdd...)
}

func (ms *metrics) started(key string) {
	if ms.keyLabel != nil {
		ms.held.Add(bg, 1, ms.withKey(key, attribute.KeyValue{}))
		return
	}
	ms.held.Add(bg, 1, ms.baseAdd...)
}

func (ms *metrics) waiting(key string, n int64) {
	if ms.keyLabel != nil {
		ms.waiters.Add(bg, n, ms.withKey(key, attribute.KeyValue{}))
		return
	}
	ms.waiters.Add(bg, n, ms.baseAdd...)
}

func (ms *metrics) renewed(key string, o renewalOutcome, headroom time.Duration) {
	if ms.keyLabel != nil {
		ms.renewals.Add(bg, 1, ms.withKey(key, attribute.String("outcome", renewalOutcomeNames[o])))
		if o == renewedOK && headroom > 0 {
			ms.headroom.Record(bg, headroom.Seconds(), ms.withKey(key, attribute.KeyValue{}))
		}
		return
	}
	ms.renewals.Add(bg, 1, ms.renewalOpts[o]...)
	if o == renewedOK && headroom > 0 {
		ms.headroom.Record(bg, headroom.Seconds(), ms.baseRecord...)
	}
}

func (ms *metrics) lost(key string, r lossReason) {
	if ms.keyLabel != nil {
		ms.losses.Add(bg, 1, ms.withKey(key, attribute.String("reason", lossReasonNames[r])))
		return
	}
	ms.losses.Add(bg, 1, ms.lossOpts[r]...)
}

// acquireOutcomeOf sorts the error of an acquisition whose wait ctx bounded.
func acquireOutcomeOf(ctx context.Context, err error) acquireOutcome {
	switch {
	case err == nil:
		return acquired
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return timedOut
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return canceled
	case errors.Is(err, ErrNotAcquired):
		return heldElsewhere
	}
	return acquireFailed
}

// lossOutcome sorts why a lost grant ended.
func lossOutcome(cause error) holdOutcome {
	if errors.Is(cause, ErrMaxHoldExceeded) {
		return maxHold
	}
	return lost
}

// lossReasonOf sorts the cause of a loss: the Client's own findings
// (deadline, MaxHold), or else reported, what told the Client.
func lossReasonOf(cause error, reported lossReason) lossReason {
	switch {
	case errors.Is(cause, ErrDeadlinePassed):
		return lossDeadline
	case errors.Is(cause, ErrMaxHoldExceeded):
		return lossMaxHold
	}
	return reported
}
