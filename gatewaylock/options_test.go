package gatewaylock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gatewaylock"
)

// A nil Option is ignored, as by every backend's New; a bad value is
// refused with ErrInvalidOption.
func TestOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []gatewaylock.Option
		ok   bool
	}{
		"nil option":               {[]gatewaylock.Option{nil, gatewaylock.WithMaxWait(time.Second), nil}, true},
		"nil HTTP client":          {[]gatewaylock.Option{gatewaylock.WithHTTPClient(nil)}, false},
		"max wait zero":            {[]gatewaylock.Option{gatewaylock.WithMaxWait(0)}, false},
		"request timeout zero":     {[]gatewaylock.Option{gatewaylock.WithRequestTimeout(0)}, false},
		"request timeout negative": {[]gatewaylock.Option{gatewaylock.WithRequestTimeout(-time.Second)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := gatewaylock.New("http://127.0.0.1:1", tc.opts...)
			if tc.ok {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				b.Close()
				return
			}
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
}

// WithRequestTimeout bounds a request to a gateway that takes it and never
// answers: the acquire fails with ErrUnavailable after the timeout, not
// after DefaultRequestTimeout (30s).
func TestRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	accepted := make(chan net.Conn, 16)
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	b, err := gatewaylock.New("http://"+ln.Addr().String(), gatewaylock.WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = b.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute})
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Acquire from a silent gateway: %v, want ErrUnavailable", err)
	}
	if ctx.Err() != nil || time.Since(start) > 10*time.Second {
		t.Errorf("Acquire took %v: the request timeout did not bound it", time.Since(start))
	}
}
