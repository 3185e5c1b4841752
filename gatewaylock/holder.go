package gatewaylock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
)

// electionOf returns the name of the election whose lock name at the
// gateway is key (election.KeyPrefix+NAME), or "".
func electionOf(key string) string {
	name, ok := strings.CutPrefix(key, election.KeyPrefix)
	if !ok || driver.ValidateKey(name) != nil {
		return ""
	}
	return name
}

type leaderAnswer struct {
	Value string `json:"value"`
	Token string `json:"token"`
}

// holderAnswer is a holder in the gateway's answers.
type holderAnswer struct {
	Token   string     `json:"token"`
	Owner   string     `json:"owner"`
	Since   *time.Time `json:"since"`
	Expires *time.Time `json:"expires"`
}

// holder is a as the holder of key.
func (a *holderAnswer) holder(key string) (driver.Holder, error) {
	tok, err := parseToken(a.Token)
	if err != nil {
		return driver.Holder{}, err
	}
	h := driver.Holder{Key: key, Token: tok, Owner: a.Owner}
	if a.Since != nil {
		h.Since = *a.Since
	}
	if a.Expires != nil {
		h.Expires = *a.Expires
	}
	return h, nil
}

type lockAnswer struct {
	Held    *bool           `json:"held"`
	Holder  *holderAnswer   `json:"holder"`
	Readers *[]holderAnswer `json:"readers"` // nil: the lock service grants no shared locks
}

// Readers returns the shared locks of key as the gateway's lock service
// has them (GET /v1/locks/{name}, its readers), by token. A gateway whose
// lock service cannot grant shared locks, or that cannot tell, gives an
// error matching errors.ErrUnsupported.
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	var a lockAnswer
	if err := b.do(ctx, "GET", "/v1/locks/"+escape(key), nil, &a, 0); err != nil {
		return nil, unsupported(err)
	}
	if a.Readers == nil {
		return nil, fmt.Errorf("gatewaylock: the gateway cannot tell the shared locks of the lock: %w", errors.ErrUnsupported)
	}
	out := make([]driver.Holder, 0, len(*a.Readers))
	for _, x := range *a.Readers {
		h, err := x.holder(key)
		if err != nil {
			return nil, err
		}
		h.Shared = true
		out = append(out, h)
	}
	return out, nil
}

// Holder reads the holder of key: the leader of an election's key (GET
// /v1/elections/{name}/leader, its value as the owner, as the lock service
// has it whoever elected it), else the holder of the lock (GET
// /v1/locks/{name}). A gateway that cannot tell gives an error matching
// errors.ErrUnsupported.
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	if name := electionOf(key); name != "" {
		var a leaderAnswer
		err := b.do(ctx, "GET", "/v1/elections/"+escape(name)+"/leader", nil, &a, 0)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.kind() == "no-leader":
			return driver.Holder{}, false, nil
		case err != nil:
			return driver.Holder{}, false, unsupported(err)
		}
		tok, err := parseToken(a.Token)
		if err != nil {
			return driver.Holder{}, false, err
		}
		return driver.Holder{Key: key, Token: tok, Owner: a.Value}, true, nil
	}
	var a lockAnswer
	if err := b.do(ctx, "GET", "/v1/locks/"+escape(key), nil, &a, 0); err != nil {
		return driver.Holder{}, false, unsupported(err)
	}
	switch {
	case a.Held == nil:
		return driver.Holder{}, false, fmt.Errorf("gatewaylock: the gateway cannot tell the holder of the lock: %w", errors.ErrUnsupported)
	case !*a.Held || a.Holder == nil:
		return driver.Holder{}, false, nil
	}
	h, err := a.Holder.holder(key)
	if err != nil {
		return driver.Holder{}, false, err
	}
	return h, true, nil
}

func parseToken(s string) (uint64, error) {
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil || tok == 0 {
		return 0, fmt.Errorf("%w: gatewaylock: malformed token %q", driver.ErrUnavailable, s)
	}
	return tok, nil
}

// unsupported marks an answer that says the gateway cannot do what it was
// asked (an older gateway without the route, a lock service that cannot
// read holders, no room for another stream) as errors.ErrUnsupported, so
// that the caller falls back.
func unsupported(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && (ae.kind() == "not-found" || ae.Status == http.StatusNotImplemented || ae.Status == http.StatusTooManyRequests) {
		return fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
	}
	return err
}

// maxEventLine bounds a line of an event stream, in bytes.
const maxEventLine = 64 << 10

// WatchHolder watches key through one of the gateway's Server-Sent Event
// streams: an election's key through its observe stream (every change of
// leader or value, whoever made it at the lock service), any other key
// through the gateway's lock events (GET /v1/events, every grant, release
// and loss of the key made through this gateway). The channel is closed
// when ctx ends, when the Backend is closed, and when the stream ends.
// A gateway that has no room for another stream, or no such stream,
// gives an error matching errors.ErrUnsupported.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	name := electionOf(key)
	path := "/v1/events?prefix=" + url.QueryEscape(key)
	if name != "" {
		path = "/v1/elections/" + escape(name) + "/observe"
	}
	if !b.life.Enter() {
		return nil, ErrClosed
	}
	defer b.life.Leave()
	sctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(b.ctx, cancel)
	ok := false
	defer func() {
		if !ok {
			stopOnClose()
			cancel()
		}
	}()
	// The answer's head, and the observe stream's first event, come at
	// once from a gateway that lives.
	timeout := time.AfterFunc(b.requestTimeout, cancel)
	body, err := b.openStream(sctx, path)
	if err != nil {
		timeout.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if b.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, unsupported(err)
	}
	r := bufio.NewReaderSize(body, maxEventLine)
	if name != "" {
		// The first event is the leader as the gateway read it after it
		// set its own watch: from then on every change is sent.
		_, _, err = nextEvent(r)
	}
	if !timeout.Stop() || err != nil {
		body.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: gatewaylock: the event stream of %q: %w", driver.ErrUnavailable, key, err)
	}
	ch := make(chan struct{}, 1)
	ok = b.life.Go(func() {
		defer close(ch)
		defer body.Close()
		defer stopOnClose()
		defer cancel()
		for {
			typ, data, err := nextEvent(r)
			if err != nil {
				return
			}
			if name == "" && typ != "reset" {
				var e struct {
					Lock string `json:"lock"`
				}
				if json.Unmarshal(data, &e) != nil || e.Lock != key {
					continue // a key that key is a prefix of
				}
			}
			select {
			case ch <- struct{}{}:
			default: // one wake-up is pending already
			}
		}
	})
	if !ok {
		body.Close()
		return nil, ErrClosed
	}
	return ch, nil
}

// openStream sends GET path and returns the body of its 200 answer.
func (b *Backend) openStream(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", b.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: gatewaylock: %w", driver.ErrInvalidOption, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: gatewaylock: GET %s: %w", driver.ErrUnavailable, strings.SplitN(path, "?", 2)[0], unwrapURL(err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Type == "" {
			e.Type, e.Detail = "http", http.StatusText(resp.StatusCode)
		}
		e.Status = resp.StatusCode
		return nil, e
	}
	return resp.Body, nil
}

// nextEvent reads the next event of a Server-Sent Event stream: its type
// and its data (comments, ids and retry fields are skipped).
func nextEvent(r *bufio.Reader) (typ string, data []byte, err error) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = fmt.Errorf("gatewaylock: an event stream's line is longer than %d bytes", maxEventLine)
			}
			return "", nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if typ != "" || data != nil {
				return typ, data, nil
			}
		case bytes.HasPrefix(line, []byte("event:")):
			typ = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
}
