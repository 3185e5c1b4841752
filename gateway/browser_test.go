package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is a headless Chromium driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: the browser reads commands from its fd 3
// and writes answers and events to its fd 4, each a JSON message ended by
// a NUL byte), so that a test can click, type and answer dialogs as a
// person would.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returned
	in      *os.File      // commands to the browser
	out     *os.File      // answers and events from the browser
	readEnd chan struct{} // closed when the reader stopped
	stderr  lockedBuffer
	session string // the page's session, for its commands

	mu      sync.Mutex // guards what follows, and writes to in
	next    int64
	replies map[int64]chan cdpMessage
	subs    map[string]chan cdpMessage // events by method
	readErr error
}

// cdpMessage is a message of the DevTools protocol: a command's answer
// (ID) or an event (Method).
type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// cdpCallTime bounds every command, and cdpWaitTime every wait for a page
// condition or an event.
const (
	cdpCallTime = 30 * time.Second
	cdpWaitTime = 30 * time.Second
)

// lockedBuffer is a bytes.Buffer safe for the writer goroutine of exec and
// a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBrowser starts Chromium with an empty page attached to, which it
// ends when the test ends.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, out: outR, exited: make(chan struct{}), readEnd: make(chan struct{}),
		replies: map[int64]chan cdpMessage{}, subs: map[string]chan cdpMessage{}}
	b.cmd = exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--no-default-browser-check", "--disable-extensions", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-pipe", "--window-size=1200,1400", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, outW} // fd 3 and fd 4
	b.cmd.Stderr = &b.stderr
	// Its own process group, so that its renderers end with it.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		cmdR.Close()
		cmdW.Close()
		outR.Close()
		outW.Close()
		t.Fatalf("chromium: %v", err)
	}
	cmdR.Close()
	outW.Close()
	go func() {
		b.cmd.Wait()
		close(b.exited)
	}()
	go b.read()
	t.Cleanup(b.close)

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	b.call(b.session, "Page.enable", nil, nil)
	return b
}

// read delivers the browser's messages: answers to their command, events
// to their subscriber (without waiting: an event nobody reads is dropped).
func (b *browser) read() {
	defer close(b.readEnd)
	rd := bufio.NewReader(b.out)
	var err error
	for {
		var msg []byte
		if msg, err = rd.ReadBytes(0); err != nil {
			break
		}
		var m cdpMessage
		if err = json.Unmarshal(msg[:len(msg)-1], &m); err != nil {
			break
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.replies[m.ID]; ch != nil {
				ch <- m
				delete(b.replies, m.ID)
			}
		} else if ch := b.subs[m.Method]; ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.readErr = err
	b.mu.Unlock()
}

// on subscribes to the events of method (of any session).
func (b *browser) on(method string) <-chan cdpMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan cdpMessage, 16)
	b.subs[method] = ch
	return ch
}

// send sends a command and returns where its answer arrives.
func (b *browser) send(session, method string, params any) <-chan cdpMessage {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.replies[id] = ch
	m := map[string]any{"id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	if session != "" {
		m["sessionId"] = session
	}
	data, err := json.Marshal(m)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.in.Write(append(data, 0)); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	return ch
}

// wait waits for the answer to a command sent, and decodes its result
// into result (if not nil).
func (b *browser) wait(method string, ch <-chan cdpMessage, result any) {
	b.t.Helper()
	select {
	case m := <-ch:
		if m.Error != nil {
			b.t.Fatalf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-b.readEnd:
		b.mu.Lock()
		err := b.readErr
		b.mu.Unlock()
		b.t.Fatalf("%s: the browser closed its pipe (%v)\n%s", method, err, b.stderr.String())
	case <-time.After(cdpCallTime):
		b.t.Fatalf("%s: no answer in %v", method, cdpCallTime)
	}
}

// call sends a command and waits for its answer.
func (b *browser) call(session, method string, params, result any) {
	b.t.Helper()
	b.wait(method, b.send(session, method, params), result)
}

// navigate loads url in the page.
func (b *browser) navigate(url string) {
	b.t.Helper()
	var r struct {
		ErrorText string `json:"errorText"`
	}
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, &r)
	if r.ErrorText != "" {
		b.t.Fatalf("navigate %s: %s", url, r.ErrorText)
	}
	// Page.navigate answers once the new document exists, which may be
	// while it is still parsed: a table without its body yet.
	b.until("the page does not finish loading", `document.readyState !== "loading"`)
}

// eval evaluates a JavaScript expression in the page (awaiting a
// promise) and decodes its value into v (if not nil).
func (b *browser) eval(expr string, v any) error {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if x := r.ExceptionDetails; x != nil {
		if x.Exception != nil {
			return errors.New(x.Exception.Description)
		}
		return errors.New(x.Text)
	}
	if v != nil {
		return json.Unmarshal(r.Result.Value, v)
	}
	return nil
}

// until waits until the expression is true in the page.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	end := time.Now().Add(cdpWaitTime)
	for {
		var ok bool
		err := b.eval(expr, &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(end) {
			b.t.Fatalf("after %v: %s (%v)", cdpWaitTime, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tables reads the body rows of the page's tables (those of more than one
// cell), as the text of their cells, by table id.
func (b *browser) tables() map[string][][]string {
	b.t.Helper()
	var out map[string][][]string
	err := b.eval(`Object.fromEntries([...document.querySelectorAll("table")].map(t => [t.id,
		[...t.tBodies[0].rows].filter(r => r.cells.length > 1).map(r => [...r.cells].map(c => c.textContent))]))`, &out)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// press moves the mouse to the middle of the element that the expression
// finds and presses and releases its left button there. It returns where
// the release's answer arrives, which the browser sends only once the
// page's click handler has returned: after a dialog it opened was
// answered.
func (b *browser) press(what, elementExpr string) <-chan cdpMessage {
	b.t.Helper()
	return b.up(b.down(what, elementExpr))
}

// point is a place in the page's viewport, in CSS pixels.
type point struct{ X, Y float64 }

// down moves the mouse to the middle of the element that the expression
// finds and presses its left button there, and returns where.
func (b *browser) down(what, elementExpr string) point {
	b.t.Helper()
	var at point
	err := b.eval(`(() => { const e = `+elementExpr+`; if (!e) throw new Error("no such element");
		e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect();
		return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`, &at)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	for _, typ := range []string{"mouseMoved", "mousePressed"} {
		b.call(b.session, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": at.X, "y": at.Y,
			"button": "left", "buttons": 1, "clickCount": 1}, nil)
	}
	return at
}

// up releases the left button pressed at at, and returns where the
// answer arrives (see press).
func (b *browser) up(at point) <-chan cdpMessage {
	b.t.Helper()
	return b.send(b.session, "Input.dispatchMouseEvent", map[string]any{"type": "mouseReleased", "x": at.X, "y": at.Y,
		"button": "left", "buttons": 0, "clickCount": 1})
}

// click clicks the element that the expression finds.
func (b *browser) click(what, elementExpr string) {
	b.t.Helper()
	b.wait("click "+what, b.press(what, elementExpr), nil)
}

// typeInto focuses the element that the expression finds and types text.
func (b *browser) typeInto(what, elementExpr, text string) {
	b.t.Helper()
	if err := b.eval(`(() => { const e = `+elementExpr+`; if (!e) throw new Error("no such element"); e.focus(); })()`, nil); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	b.call(b.session, "Input.insertText", map[string]any{"text": text}, nil)
}

// screenshotDirEnv names a directory where screenshot keeps the
// screenshots of the browser tests, to be looked at after the run;
// without it they go to the test's temporary directory, removed when the
// test ends.
const screenshotDirEnv = "DISTLOCK_SCREENSHOTS"

// screenshot saves a PNG of the whole page, into $DISTLOCK_SCREENSHOTS
// (named after the test) or the test's directory, and returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		b.t.Fatalf("screenshot: not a PNG (%v)", err)
	}
	path := filepath.Join(b.t.TempDir(), name)
	if dir := os.Getenv(screenshotDirEnv); dir != "" {
		path = filepath.Join(dir, strings.NewReplacer("/", "-", " ", "_").Replace(b.t.Name())+"-"+name)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// viewport makes the page width by height CSS pixels, as a window of
// that size shows it.
func (b *browser) viewport(width, height int) {
	b.t.Helper()
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height,
		"deviceScaleFactor": 1, "mobile": false}, nil)
	// Without a scrollbar taking a part of the width, as on a phone, and
	// as a screenshot of the whole page shows it.
	b.call(b.session, "Emulation.setScrollbarsHidden", map[string]any{"hidden": true}, nil)
}

// close asks the browser to end, and ends its process group if it has not
// within a few seconds.
func (b *browser) close() {
	b.mu.Lock()
	b.next++
	b.in.Write([]byte(fmt.Sprintf(`{"id":%d,"method":"Browser.close"}`+"\x00", b.next))) // an error: it is gone already
	b.mu.Unlock()
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
	// Renderers that outlived the browser would keep the pipe open.
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	b.in.Close()
	b.out.Close()
	<-b.readEnd
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	data, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("jsString: %v", err))
	}
	return string(data)
}

// waitTables waits until the page's tables (as tables reads them) pass
// check, which returns what is still missing, or "" once nothing is; it
// returns them.
func (b *browser) waitTables(check func(tb map[string][][]string) string) map[string][][]string {
	b.t.Helper()
	end := time.Now().Add(cdpWaitTime)
	for {
		tb := b.tables()
		missing := check(tb)
		if missing == "" {
			return tb
		}
		if time.Now().After(end) {
			b.t.Fatalf("after %v, the page %s: %q", cdpWaitTime, missing, tb)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
