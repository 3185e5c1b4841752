package fence_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
)

// A Counter counts on the provider of its options, under its guard's name;
// nil options are ignored.
func TestCounter(t *testing.T) {
	mp := metrictest.NewProvider()
	c := fence.NewCounter("g", nil, fence.WithMeterProvider(mp), nil)
	c.Rejected(context.Background())
	c.Rejected(context.Background())
	if n := metrictest.Rejections(t, mp, "g"); n != 2 {
		t.Errorf("rejections %d, want 2", n)
	}
}

// A Register counts each token it refuses, whether made with NewRegister or
// the zero value (on the global provider, which is not this test's).
func TestRegisterCountsRejections(t *testing.T) {
	mp := metrictest.NewProvider()
	reg := fence.NewRegister(fence.WithMeterProvider(mp))
	for _, token := range []uint64{5, 4, 6, 0, 5} {
		reg.Admit("res", token)
	}
	if err := reg.Do("res", 3, func() error { return nil }); err == nil {
		t.Fatal("Do with a stale token succeeded")
	}
	if n := metrictest.Rejections(t, mp, "fence.Register"); n != 4 {
		t.Errorf("rejections %d, want 4 (tokens 4, 0, 5 and 3)", n)
	}
	var zero fence.Register
	if err := zero.Admit("res", 0); err == nil {
		t.Error("the zero Register admitted token 0")
	}
}
