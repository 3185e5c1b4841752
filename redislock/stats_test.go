package redislock_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats: command name -> calls and server
// time. Commands run by scripts are counted under their own names as well
// as inside the script's time.
func commandStats(t testing.TB, c *redis.Client) map[string]cmdStat {
	t.Helper()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]cmdStat{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		m[name] = st
	}
	return m
}

// serverCPU reads the CPU time (user and system) the server has used.
func serverCPU(t testing.TB, c *redis.Client) time.Duration {
	t.Helper()
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu: %s: %v", line, err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// resetStats zeroes the server's command statistics.
func resetStats(t testing.TB, c *redis.Client) {
	t.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// sumStats adds up the calls and server time of the named commands.
func sumStats(m map[string]cmdStat, names ...string) cmdStat {
	var s cmdStat
	for _, n := range names {
		s.calls += m[n].calls
		s.usec += m[n].usec
	}
	return s
}

// monitor records, with MONITOR, the commands that clients send to a
// server (not those that scripts run).
type monitor struct {
	conn  net.Conn
	lines chan string
}

// startMonitor opens a MONITOR connection to addr, closed with the test.
func startMonitor(t testing.TB, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: conn, lines: make(chan string, 1<<16)}
	done := make(chan struct{})
	t.Cleanup(func() { conn.Close(); <-done })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+OK" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	conn.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		defer close(m.lines)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- strings.TrimSpace(line)
		}
	}()
	return m
}

// requests returns the commands clients sent since the last call (by
// name, in order), syncing on an ECHO sent with c.
func (m *monitor) requests(t testing.TB, c *redis.Client) []string {
	t.Helper()
	marker := "monitor-mark-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := c.Echo(context.Background(), marker).Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-m.lines:
			if !ok {
				t.Fatal("MONITOR connection closed")
			}
			if strings.Contains(line, marker) {
				return got
			}
			// +<time> [<db> <client address or "lua">] "<command>" ...
			_, rest, _ := strings.Cut(line, "[")
			src, rest, _ := strings.Cut(rest, "]")
			if strings.HasSuffix(src, " lua") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
			got = append(got, strings.ToLower(strings.Trim(name, `"`)))
		case <-timeout:
			t.Fatalf("MONITOR: marker not seen; so far %v", got)
		}
	}
}

// waitFor reads the monitored commands until one contains all of parts (a
// command's arguments are quoted), and fails after a minute.
func (m *monitor) waitFor(t testing.TB, parts ...string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-m.lines:
			if !ok {
				t.Fatal("MONITOR connection closed")
			}
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return
			}
		case <-timeout:
			t.Fatalf("MONITOR: no command with %q within a minute", parts)
		}
	}
}
