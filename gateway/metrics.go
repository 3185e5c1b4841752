package gateway

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName is the OpenTelemetry scope of the gateway's
// instruments.
const instrumentationName = "github.com/distlock/distlock/gateway"

// instruments are the gateway's own metrics; the locks' are the Clients'
// (see the root package).
type instruments struct {
	sessions metric.Int64UpDownCounter // distlock.gateway.sessions
	waiting  metric.Int64UpDownCounter // distlock.gateway.waiting: waiting acquires, keepalives and blocking reads
	requests metric.Int64Counter       // distlock.gateway.requests{route, status}
}

func newInstruments(mp metric.MeterProvider, _ *Gateway) (*instruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	var in instruments
	var err error
	if in.sessions, err = m.Int64UpDownCounter("distlock.gateway.sessions",
		metric.WithDescription("Sessions open."), metric.WithUnit("{session}")); err != nil {
		return nil, err
	}
	if in.waiting, err = m.Int64UpDownCounter("distlock.gateway.waiting",
		metric.WithDescription("Requests waiting: acquires and keepalives with a wait (long-polls)."),
		metric.WithUnit("{request}")); err != nil {
		return nil, err
	}
	if in.requests, err = m.Int64Counter("distlock.gateway.requests",
		metric.WithDescription("HTTP requests answered, by route and status code."),
		metric.WithUnit("{request}")); err != nil {
		return nil, err
	}
	return &in, nil
}
