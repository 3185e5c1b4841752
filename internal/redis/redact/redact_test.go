package redact_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/redis/redact"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "S3CRETBYTES"

// Every rendering of a Secret but MarshalBinary shows "[secret]", whether
// it is given as a Secret or a *Secret, alone or among a command's
// arguments.
func TestRenderingsShowNoSecret(t *testing.T) {
	s := redact.Bytes([]byte(secret))
	renderings := map[string]func(v any) (string, error){
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"xml": func(v any) (string, error) {
			b, err := xml.Marshal(v)
			return string(b), err
		},
		"gob": func(v any) (string, error) {
			var buf bytes.Buffer
			err := gob.NewEncoder(&buf).Encode(v)
			return buf.String(), err
		},
		"slog text": func(v any) (string, error) {
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("cmd", "args", v, "arg", v)
			return buf.String(), nil
		},
		"slog json": func(v any) (string, error) {
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("cmd", "args", v, "arg", v)
			return buf.String(), nil
		},
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-8v", "%T %[1]v"} {
		renderings["fmt "+verb] = func(v any) (string, error) { return fmt.Sprintf(verb, v), nil }
	}
	values := map[string]any{"Secret": s, "*Secret": &s, "args": []any{"evalsha", &s, 1}}
	for name, render := range renderings {
		for vname, v := range values {
			if (name == "gob" || name == "xml") && vname == "args" {
				continue // they encode no []any of unregistered types
			}
			got, err := render(v)
			if err != nil {
				t.Errorf("%s of a %s: %v", name, vname, err)
				continue
			}
			if strings.Contains(got, secret) || !strings.Contains(got, "[secret]") {
				t.Errorf("%s of a %s: %q, want [secret] and not the secret", name, vname, got)
			}
		}
	}
	for name, got := range map[string]string{"String": s.String(), "GoString": s.GoString(), "LogValue": s.LogValue().String()} {
		if got != "[secret]" {
			t.Errorf("%s: %q, want [secret]", name, got)
		}
	}
	if b, err := s.MarshalText(); err != nil || string(b) != "[secret]" {
		t.Errorf("MarshalText: %q, %v; want [secret]", b, err)
	}
	if b, err := s.MarshalBinary(); err != nil || string(b) != secret {
		t.Errorf("MarshalBinary: %q, %v; want the secret", b, err)
	}
	if b, err := (redact.Secret{}).MarshalBinary(); err != nil || len(b) != 0 {
		t.Errorf("MarshalBinary of the zero Secret: %q, %v; want no bytes", b, err)
	}
}

// go-redis shows a Secret as "[secret]" in cmd.String and cmd.Args, and
// writes its bytes to the server.
func TestGoRedisWritesTheBytes(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s := redact.Bytes([]byte(secret))
	cmd := redis.NewStatusCmd(ctx, "set", "k", &s)
	if err := c.Process(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != secret {
		t.Errorf("the server holds %q, %v; want the secret", got, err)
	}
	if str := cmd.String(); strings.Contains(str, secret) || !strings.Contains(str, "[secret]") {
		t.Errorf("cmd.String: %q, want [secret]", str)
	}
	if b, err := json.Marshal(cmd.Args()); err != nil || strings.Contains(string(b), secret) {
		t.Errorf("json of cmd.Args: %s, %v", b, err)
	}
}

// Writing a *Secret as go-redis does allocates nothing.
func TestNoAllocations(t *testing.T) {
	s := redact.Bytes([]byte(secret))
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		var v any = &s
		b, _ := v.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
		n += len(b)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per write, want 0", allocs)
	}
}
