// Package election is leader election over any distlock Client: candidates
// campaign, one of them at a time holds a term, and the term's token
// fences the leader's writes, on every backend.
//
//	e, err := election.New(client, "payments/leader")
//	term, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until elected
//	err = store.Write(term.Context(), data, term.Token()) // the storage checks the token
//	err = term.Resign(ctx)
//
// Leader reads who leads now, Observe follows the leader as it changes,
// and Run leads while a function runs and campaigns again after it.
//
// # Guarantees
//
// A term is a lock grant of the election's key (see Layout), and has what
// a Lock has: while its context is not done, no other candidate can have
// been elected, judged on the local monotonic clock with the lock's clock
// drift and safety margin allowed for; the context is cancelled, and Err
// reports the term lost, before another candidate can be elected. Err is
// exact when called, ahead of the cancellation. A Campaign whose context
// ends returns an error and never a term. Resign is owner-checked: a term
// that ended never ends a later one, whatever the order of the replies.
//
// # Not guaranteed
//
//   - That the leader is not paused between checking its term and acting:
//     a pause past the term's end lets the next leader act too. Only the
//     storage can refuse the old leader's late write (see Fencing).
//   - That Observe sees every term: it reports the leader as it reads it
//     when woken, so a term that begins and ends between two reads, or
//     while the receiver is slow, is not seen. What it sends is in term
//     order, and the last state reaches the receiver.
//   - That Leader is still the leader when the caller acts on the answer.
//   - The backend's own limits: a service that loses its state can elect
//     twice and reuse a token (see each backend's package documentation).
//   - Fairness between processes, beyond what the backend gives locks.
//
// # Durability
//
// An election keeps nothing of its own: its terms, and their tokens, last
// as the backend's locks do (see the backend's Durability).
//
// # Waiting
//
// Campaign waits as Acquire does, on the service's own signal (a watch, a
// pub/sub message, the kernel), and polls only for a holder that vanished
// silently. Observe is woken by the backend where it can watch a key
// (memlock, filelock on Linux, etcdlock, redislock, redlock, zklock and
// pglock, through driver.HolderWatcher; gatewaylock through the gateway's
// observe stream of the election), reads again at the leader's expiry,
// which a service may pass silently, and polls every distlock.WatchPoll
// where the backend cannot watch (pglock in lease mode without a LISTEN
// session, as through PgBouncer in transaction mode).
//
// # Fencing
//
// A term's Token is its lock's fencing token: strictly greater than every
// earlier term's, and than every earlier lock of the election's key. One
// fence.Register, or a backend's check-and-write helper, admits locks and
// terms alike: pass Token with every write the leader makes, and let the
// storage refuse a token lower than one it has admitted. A helper that
// takes the lock itself (etcdlock's Fence, which has etcd compare the
// candidate key's create revision in the write's transaction) takes the
// term's Lock.
//
// # Layout
//
// The election named NAME is the lock of the key "election/NAME"
// (KeyPrefix+NAME), held by the leader, with the leader's value stored as
// the grant's owner (distlock.WithLockOwner; Proclaim changes it with
// Lock.SetOwner). The prefix keeps an election apart from a lock of the
// same name, which the program may take for another reason, while
// `distlock status election/` lists every election's leader, and an
// operator can see, or take part with, `distlock run election/NAME`.
//
// Each term is a Lock with the Client's policy (deadline, renewal, loss),
// acquired as a candidacy in the election (distlock.WithElection): a
// backend whose service has an election layout of its own keeps the
// candidacy in it, so that the service's other clients take part in the
// same elections, and every other backend takes the key as a lock (see
// "Elections" in package driver's documentation). Leader and Observe read
// and watch the holder of the key, which such a backend reports from its
// layout, whoever the candidate is.
//
//   - etcd (etcdlock): concurrency.Election's layout, at the lock name of
//     the election's key (Backend.KeyPath(Election.Key())): a candidate
//     is the key NAME/<lease ID in hex> with its value as the key's
//     value, the leader is the key created first, and the term is its
//     create revision. `etcdctl elect NAME PROPOSAL` campaigns in the
//     same election and `etcdctl elect -l NAME` observes it. The place is
//     also where the lock layout kept the key, so locks of it, and
//     releases that kept elections as locks, still exclude the leader.
//   - ZooKeeper (zklock): Apache Curator's LeaderLatch layout, at the
//     lock path of the election's key (Backend.KeyPath(Election.Key())):
//     a candidate is a protected ephemeral sequential node
//     "_c_<uuid>-latch-<sequence>" whose data is its value (the
//     participant id), the leader is the first node in sequence order,
//     and the term is the node's czxid. Curator's LeaderLatch on that
//     path campaigns in the same election (do not Proclaim when it does:
//     see zklock's Elections). zklock orders locks of the path and
//     candidacies together, by sequence, so they exclude each other;
//     Curator's recipes, and releases that kept elections as locks, do
//     not order the other kind's nodes ahead of their own.
//   - Every other backend: the lock layout above. Terms' tokens come from
//     the key's lock counter.
//
// An Election, a Term and the channels they return are safe for
// concurrent use. Observe runs a goroutine until its context ends or the
// Client is closed.
package election
