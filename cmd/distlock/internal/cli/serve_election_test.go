//go:build linux

package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

// etcdctlRun runs etcdctl with args against endpoints until stop
// (SIGINT, on which `etcdctl elect` resigns), sending the lines it
// prints.
func etcdctlRun(t *testing.T, endpoints []string, args ...string) (lines <-chan string, stop func()) {
	t.Helper()
	cmd := exec.Command(testserver.EtcdctlPath(t),
		append([]string{"--endpoints", strings.Join(endpoints, ","), "--dial-timeout", "5s"}, args...)...)
	// ETCDCTL_* variables of the environment would override the flags.
	cmd.Env = []string{"ETCDCTL_API=3", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 16)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
		io.Copy(io.Discard, out)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { <-readDone; done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("etcdctl %s did not exit on SIGINT", args[0])
		}
	}
	t.Cleanup(stop)
	return ch, stop
}

// lineWithin returns the next line of lines, within a minute.
func lineWithin(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("etcdctl ended")
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("etcdctl printed nothing in a minute")
		return ""
	}
}

// gatewayJSON sends a request to the gateway at url and decodes its
// answer into a map.
func gatewayJSON(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// A gateway over etcd shares its elections with etcdctl, through etcd's
// own election layout: the gateway's leader and observe report `etcdctl
// elect`'s proposal, a campaign through the gateway waits while etcdctl
// leads and is elected, with a later term, when it resigns, and `etcdctl
// elect -l` shows the gateway's value.
func TestServeElectionSharedWithEtcdctl(t *testing.T) {
	// newEnv pauses the test (t.Parallel) until a parallel slot is free,
	// minutes into the package's run: the deadline starts after it.
	e := newEnv(t)
	ec := testserver.StartEtcd(t)
	backend := "etcd://" + ec.Members[0].ClientAddr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eb, err := etcdlock.OpenURL(ctx, backend)
	if err != nil {
		t.Fatal(err)
	}
	name := eb.KeyPath(election.KeyPrefix + "svc") // what etcdctl is given
	eb.Close()

	s := e.serve("--backend", backend)
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	elected, resign := etcdctlRun(t, ec.Endpoints, "elect", name, "from-etcdctl")
	lineWithin(t, elected) // the candidate's key: etcdctl leads
	if v := lineWithin(t, elected); v != "from-etcdctl" {
		t.Fatalf("etcdctl elect printed %q", v)
	}
	status, l := gatewayJSON(t, "GET", s.url+"/v1/elections/svc/leader", nil)
	if status != 200 || l["value"] != "from-etcdctl" {
		t.Fatalf("leader through the gateway: %d %v, want etcdctl's proposal", status, l)
	}
	ctlTerm, _ := strconv.ParseUint(l["token"].(string), 10, 64)

	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	req, _ := http.NewRequestWithContext(obsCtx, "GET", s.url+"/v1/elections/svc/observe", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	nextLeader := func() map[string]any {
		t.Helper()
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				var m map[string]any
				json.Unmarshal([]byte(data), &m)
				return m
			}
		}
		t.Fatalf("the observe stream ended: %v", events.Err())
		return nil
	}
	if m := nextLeader(); m["value"] != "from-etcdctl" || m["token"] != l["token"] {
		t.Fatalf("observe sent %v first, want etcdctl's term %v", m, l)
	}

	_, sess := gatewayJSON(t, "POST", s.url+"/v1/sessions", map[string]any{"owner": "gw", "ttl": "10s"})
	sid, _ := sess["id"].(string)
	type answer struct {
		status int
		body   map[string]any
	}
	campaigned := make(chan answer, 1)
	go func() {
		st, m := gatewayJSON(t, "POST", s.url+"/v1/elections/svc/campaign?wait=60s",
			map[string]any{"session": sid, "value": "from-gateway"})
		campaigned <- answer{st, m}
	}()
	observed, stopObserver := etcdctlRun(t, ec.Endpoints, "elect", "-l", name)
	lineWithin(t, observed)
	if v := lineWithin(t, observed); v != "from-etcdctl" {
		t.Fatalf("etcdctl elect -l printed %q while etcdctl leads", v)
	}
	select {
	case a := <-campaigned:
		t.Fatalf("the gateway's campaign returned while etcdctl leads: %d %v", a.status, a.body)
	default:
	}
	resign()
	a := <-campaigned
	if a.status != 200 {
		t.Fatalf("campaign: %d %v", a.status, a.body)
	}
	term, _ := strconv.ParseUint(a.body["token"].(string), 10, 64)
	if term <= ctlTerm {
		t.Errorf("the gateway's term %d after etcdctl's %d", term, ctlTerm)
	}
	for {
		m := nextLeader()
		if m["token"] == a.body["token"] {
			if m["value"] != "from-gateway" {
				t.Errorf("observe: %v, want the gateway's value", m)
			}
			break
		}
	}
	for {
		if v := lineWithin(t, observed); v == "from-gateway" {
			break
		}
	}
	stopObserver()
	if st, m := gatewayJSON(t, "POST", s.url+"/v1/elections/svc/resign",
		map[string]any{"session": sid, "token": a.body["token"]}); st != 200 {
		t.Errorf("resign: %d %v", st, m)
	}
	if st, _ := gatewayJSON(t, "GET", s.url+"/v1/elections/svc/leader", nil); st != 404 {
		t.Errorf("leader after the resignation: %d, want 404", st)
	}
	gatewayJSON(t, "DELETE", s.url+"/v1/sessions/"+sid, nil)
}
