package gatewaylock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/gatewaylock"
)

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cr3t-Token-value"
	for _, raw := range []string{
		"distlock+http://127.0.0.1",
		"distlock+http://127.0.0.1:7420",
		"distlock+https://gateway.example:443/locks",
		"distlock+http://:" + secret + "@127.0.0.1:7420",
		"distlock+http://[::1]:7420/?token=" + secret,
	} {
		b, err := gatewaylock.OpenURL(ctx, raw)
		if err != nil {
			t.Errorf("OpenURL(%q): %v", raw, err)
			continue
		}
		b.Close()
		ob, err := backends.Open(ctx, raw)
		if err != nil {
			t.Errorf("backends.Open(%q): %v", raw, err)
			continue
		}
		ob.Close()
	}
	for _, raw := range []string{
		"distlock+http:127.0.0.1",
		"distlock+http://",
		"distlock+ftp://h",
		"distlock+http://a,b",
		"distlock+http://h:99999",
		"distlock+http://user:" + secret + "@h",
		"distlock+http://h/?token=" + secret + "&token=" + secret + "x",
		"distlock+http://:" + secret + "@h/?token=" + secret,
	} {
		_, err := gatewaylock.OpenURL(ctx, raw)
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("OpenURL(%q): the error shows the token: %v", raw, err)
		}
	}
	// TLS files are for distlock+https://, once each.
	for raw, want := range map[string]string{
		"distlock+http://h?ca=/ca.pem":               `parameter "ca": needs distlock+https://`,
		"distlock+https://h?ca=/a.pem&ca=/b.pem":     `parameter "ca" given 2 times`,
		"distlock+https://h?cert=/c.pem":             `parameter "cert": needs key`,
		"distlock+https://h?ca=/nonexistent/ca.pem":  "TLS files: CA file",
		"distlock+http://:" + secret + "@h?token=t2": `parameter "token": the URL has a token before the host too`,
	} {
		_, err := gatewaylock.OpenURL(ctx, raw)
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption saying %q", raw, err, want)
		}
	}
}
