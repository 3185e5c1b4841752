//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A gateway over a lock directory with a lock file that it cannot read
// lists the others, and names that one, as `distlock status` does: the
// listing (GET /v1/locks) answers the holders it read and the entries it
// could not read under unread; a read of one lock (GET /v1/locks/{name})
// answers a holder it found, and null, "cannot tell", for the lock whose
// file it cannot read; the sequencer check answers for a holder it found.
// Only a listing that could read nothing under its prefix fails. The
// gateway runs as another user: root reads every file.
func TestServeListsAroundUnreadableLockFiles(t *testing.T) {
	e := newEnv(t)
	distlockBin, dir, a := partlyReadable(t)
	cmd := asNobody(exec.Command(distlockBin, "--backend", "file://"+dir, "serve", "--listen", "127.0.0.1:0"))
	cmd.Env, cmd.Dir = testEnviron(), filepath.Dir(dir)
	s := e.serveCmd(cmd)
	tok := fmt.Sprint(a.Token())
	unread := "cannot tell whether a lock is held: open " + filepath.Join(dir, "jobs%2Fab.lock") + ": permission denied"

	type listing struct {
		Locks []struct {
			Lock, Token, Owner string
		}
		Unread []string
	}
	var l listing
	if code, body := get(t, s.url+"/v1/locks?prefix=jobs/"); code != 200 || json.Unmarshal([]byte(body), &l) != nil ||
		len(l.Locks) != 1 || l.Locks[0].Lock != "jobs/a" || l.Locks[0].Token != tok || l.Locks[0].Owner != "tester" ||
		len(l.Unread) != 1 || l.Unread[0] != unread {
		t.Errorf("GET /v1/locks?prefix=jobs/: %d %s; want jobs/a held by tester with token %s, and unread [%q]", code, body, tok, unread)
	}
	if code, body := get(t, s.url+"/v1/locks?prefix=jobs/ab"); code != 500 || !strings.Contains(body, unread) {
		t.Errorf("GET /v1/locks?prefix=jobs/ab: %d %s; want 500 naming the file it could not read", code, body)
	}

	var read struct {
		Held   *bool
		Holder struct{ Token string }
	}
	if code, body := get(t, s.url+"/v1/locks/jobs%2Fa"); code != 200 || json.Unmarshal([]byte(body), &read) != nil ||
		read.Held == nil || !*read.Held || read.Holder.Token != tok {
		t.Errorf("GET /v1/locks/jobs%%2Fa: %d %s; want held with token %s", code, body, tok)
	}
	read.Held = nil
	if code, body := get(t, s.url+"/v1/locks/jobs%2Fab"); code != 200 || json.Unmarshal([]byte(body), &read) != nil ||
		read.Held != nil || !strings.Contains(body, `"held":null`) {
		t.Errorf("GET /v1/locks/jobs%%2Fab: %d %s; want held null: the gateway cannot tell", code, body)
	}

	resp, err := http.Post(s.url+"/v1/locks/jobs%2Fa/check", "application/json", strings.NewReader(`{"token":"`+tok+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var checked struct{ Current bool }
	err = json.NewDecoder(resp.Body).Decode(&checked)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || !checked.Current {
		t.Errorf("check of jobs/a's token: %d %+v (%v); want current", resp.StatusCode, checked, err)
	}
}
