package bench

import (
	"strings"
	"testing"
)

func TestParseMntr(t *testing.T) {
	out := "zk_version\t3.8.0-abc, built on 2024-12-29 17:54 UTC\n" +
		"zk_avg_latency\t1.5484\n" +
		"zk_packets_received\t51\n" +
		"zk_packets_sent\t50\n" +
		"zk_avg_updatelatency\t2.0476\n" +
		"zk_cnt_updatelatency\t21\n" +
		"zk_sum_updatelatency\t43\n" +
		"zk_cnt_readlatency\t10\n"
	s, err := parseMntr(out)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 51 || s.Ops != 31 || s.ByName["writes"] != 21 || s.ByName["reads"] != 10 || len(s.ByName) != 2 {
		t.Errorf("parseMntr = %+v, want 51 requests, 31 ops (21 writes, 10 reads)", s)
	}

	// A server that refuses mntr answers with a sentence; so does one
	// whose mntr lacks the counters: both are errors, not zero counts.
	for _, bad := range []string{
		"mntr is not executed because it is not in the whitelist.\n",
		"zk_packets_received\t51\nzk_cnt_readlatency\t10\n",
	} {
		if _, err := parseMntr(bad); err == nil || !strings.Contains(err.Error(), "zookeeper mntr") {
			t.Errorf("parseMntr(%q) = %v, want an error naming mntr", bad, err)
		}
	}
}

func TestStatementName(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT pg_advisory_lock(hashtextextended($1, 0))":        "pg_advisory_lock",
		" SELECT pg_advisory_unlock(hashtextextended($1, 0))":     "pg_advisory_unlock",
		"SELECT distlock_acquire($1, $2, $3, $4)":                 "distlock_acquire",
		"CALL distlock_release($1, $2)":                           "distlock_release",
		`SELECT "public".distlock_acquire($1, $2, $3, $4)`:        "distlock_acquire",
		`SELECT granted FROM "bench".distlock_lease_wait($1, $2)`: "distlock_lease_wait",
		"UPDATE t SET held = false WHERE key = $1 RETURNING pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))":   "pg_advisory_unlock (after UPDATE)",
		"SELECT granted, retry_ms FROM distlock_lease_acquire($1, $2, $3, $4)":                                                                                     "distlock_lease_acquire",
		"SELECT value FROM torture_register WHERE resource = $1":                                                                                                   "SELECT value FROM tortur",
		"WITH released AS (\n\tUPDATE t SET held = false RETURNING 1)\nSELECT pg_advisory_unlock(hashtextextended($1, 0))\nFROM (SELECT count(*) FROM released) r": "pg_advisory_unlock (after WITH)",
		"UPDATE t SET held = false\nWHERE key = $1\nRETURNING pg_advisory_unlock(hashtextextended($1, 0))":                                                         "pg_advisory_unlock (after UPDATE)",
		"UPDATE t SET held = false WHERE key = $1 RETURNING token":                                                                                                 "UPDATE t SET held = fals",
		"SELECT count(*)\nFROM pg_locks": "count",
		"SELECT 1":                       "SELECT 1",
		"SELECT held FROM pg_locks WHERE objid = (1)": "SELECT held FROM pg_lock",
	} {
		if got := statementName(sql); got != want {
			t.Errorf("statementName(%q) = %q, want %q", sql, got, want)
		}
	}
}
