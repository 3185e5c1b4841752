package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/distlock/testserver"
)

// ZooKeeper returns the client addresses of a standalone ZooKeeper server,
// starting it if needed.
func (e *Env) ZooKeeper() []string {
	e.tb.Helper()
	if e.zk == nil {
		e.zk = testserver.StartZooKeeper(e.tb)
	}
	if e.via == nil {
		return e.zk.Servers
	}
	var ss []string
	for _, a := range e.zk.Servers {
		ss = append(ss, e.route(a))
	}
	return ss
}

// ZooKeeperSnapshot reads the server's request counters from the mntr
// four-letter word: packets received (every request, pings and session
// creations included) and the requests it finished, split into writes
// (those that go through the transaction log) and reads.
func (e *Env) ZooKeeperSnapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	out, err := testserver.FourLetterWord(e.zk.Servers[0], "mntr")
	if err != nil {
		return Snapshot{}, fmt.Errorf("zookeeper mntr: %w", err)
	}
	return parseMntr(out)
}

// parseMntr reads zk_packets_received, zk_cnt_updatelatency (requests with
// a transaction: creates, deletes, session creations and closes) and
// zk_cnt_readlatency (the others: reads, pings) from mntr's
// "name<TAB>value" lines.
func parseMntr(out string) (Snapshot, error) {
	s := Snapshot{ByName: map[string]int64{}}
	found := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "\t")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "zk_packets_received":
			s.Requests = n
		case "zk_cnt_updatelatency":
			s.ByName["writes"] = n
			s.Ops += n
		case "zk_cnt_readlatency":
			s.ByName["reads"] = n
			s.Ops += n
		default:
			continue
		}
		found++
	}
	if found != 3 {
		return Snapshot{}, fmt.Errorf("zookeeper mntr: %d of 3 counters found in %q", found, truncate(out, 200))
	}
	return s, sc.Err()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// zkVersion adds the ZooKeeper server's version, from srvr.
func (e *Env) zkVersion(out map[string]string) {
	if e.zk == nil {
		return
	}
	srvr, err := testserver.FourLetterWord(e.zk.Servers[0], "srvr")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(srvr, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version: "); ok {
			v, _, _ = strings.Cut(v, "-") // "3.8.0-debian--1, built on ..."
			out["ZooKeeper"] = strings.TrimSpace(v)
		}
	}
}
