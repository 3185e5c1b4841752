package fencecount_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/internal/fencecount"
	"github.com/distlock/distlock/internal/metrictest"
)

func TestCounter(t *testing.T) {
	r, mp := metrictest.Reader()
	c := fencecount.New(mp, "g")
	c.Rejected(context.Background())
	c.Rejected(context.Background())
	if n := metrictest.Rejections(t, r, "g"); n != 2 {
		t.Errorf("rejections %d, want 2", n)
	}
}
