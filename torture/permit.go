package torture

// The permit rows: package semaphore's permits under the faults of the
// lock rows. The workers' grants are permits of a semaphore of limit 1
// (see Scenario.Permit), so the generic scenarios run unchanged: a permit
// of a limit of 1 is a grant of the semaphore's key that excludes every
// other, the mutex model finds two live permits, the token model a permit
// not above the last grant, and the register a late write with an old
// permit's token that a fenced store admitted (every permit's token is
// above every earlier grant's of the key, so one fence admits them). Backends that grant no permits are
// absent: Redlock refuses them (a quorum of independent nodes could grant
// more than the limit), and so does the gateway's client, whose session
// holds one permit of a semaphore.
func init() {
	noPermits := map[string]string{
		backendRedlock: "redlock grants no permits (errors.ErrUnsupported): a quorum of independent nodes could over-grant",
		backendGateway: "gatewaylock grants no permits: a gateway session holds one permit of a semaphore",
	}
	why := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range noPermits {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	Scenarios = append(Scenarios,
		Scenario{
			Name: "permit", Variant: "pause", Permit: true,
			Title:  "as pause, on a semaphore of limit 1: the holder of the permit, having checked it, is SIGSTOPped past its TTL; another worker is granted the permit and writes; then the first resumes and writes with its old permit's token",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendZK: ExpectBite, backendPG: ExpectBite},
			Why: why(map[string]string{
				backendPG:   "pglock's permits are lease rows, run in lease mode as the lock rows' pause",
				backendFile: "a permit on file:// is a slot file held with flock, with no TTL: a stopped holder keeps it (see pause)",
			}),
			Run:   pauseScenario,
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(pauseScenario)},
		},
		Scenario{
			Name: "permit", Variant: "partition", Permit: true,
			Title:  "as partition, on a semaphore of limit 1: the holder of the permit, cut off from the service (proxy blackhole), keeps writing with its permit's token, ignoring its context, after another worker was granted the permit",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendZK: ExpectBite, backendPG: ExpectBite},
			Why: why(map[string]string{
				backendPG:   "pglock's permits are lease rows, run in lease mode (a session-mode holder cut off keeps its connection's hold: see partition): the proxy is between the holder and its pool's connections, its LISTEN session is direct; its permit's row expires by the server's clock",
				backendFile: "no network between a process and its kernel",
			}),
			Run:   partitionScenario,
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(partitionScenario)},
		},
	)
	findings["permit/pause"] = "A permit is a lease like a lock's: the frozen holder's permit ends by its local deadline before the service grants it again (checked in every round: its deadline as it stood when it was stopped comes before the other worker's Acquire returns), but a holder paused between its check and its write still writes, with its old permit's token, after the next holder wrote. Without a fence the store takes it; a fenced store refuses it."
	findings["permit/partition"] = "The cut-off holder's permit context is cancelled by its local deadline before the service lets the permit lapse and grants it again (the mutex model holds), but a holder that ignores its context keeps writing: only the fence refuses its writes."
}
