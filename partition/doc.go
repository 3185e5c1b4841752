// Package partition shares a fixed list of units of work among the live
// members of a group, over any distlock Client: every unit is owned by one
// member at a time, ownership is balanced, each ownership carries a
// fencing token, and units move when members come and go.
//
//	p, err := partition.New(client, "billing", partition.Count(64), partition.WithMember("worker-3"))
//	err = p.Run(ctx, func(ctx context.Context, u partition.Unit) error {
//		// own u.Name while ctx lives; write with u.Token
//	})
//	a, err := p.Assignment(ctx) // who owns what
//
// # Layout
//
// A group is keys of the Client's service, and nothing else:
//
//   - a member holds the lock partition/GROUP/members/ID (KeyPrefix,
//     Partition.MemberKey) while it is a member: a member is a lease, so a
//     member that dies leaves the group within its lock's TTL (or at once
//     where the service ends a dead holder's grants, as filelock and
//     pglock's session mode do);
//   - the owner of a unit holds the lock partition/GROUP/units/UNIT
//     (Partition.UnitKey), with its member id as the lock's owner.
//
// So `distlock status partition/GROUP/` lists a group, and any client of
// distlock can take part. Member ids and unit names cannot contain "/",
// so that no group's keys are another's.
//
// # How units are assigned
//
// Every reconcile interval (WithReconcile), each member lists the group's
// members and computes the same assignment from them (Assign): rendezvous
// hashing with bounded loads, so shares differ by one unit at most and a
// join or a leave moves about 1/N of the units when each member has many
// (with few, rounding shares to whole units moves some more: see Assign).
// It then waits for the
// lock of each unit planned to it, and gives up each unit planned
// elsewhere once it has held it for the minimum hold (WithMinHold): it
// cancels fn's context, waits for fn to return, and releases the lock,
// whereupon the new owner, already waiting for the lock, is granted it.
// A planned move waits out no TTL.
//
// The assignment is advice; the lock is the law. Members may read the
// membership at different moments and disagree for a while; they then
// wait for the same unit's lock, and one of them holds it.
//
// # Guarantees
//
//   - A unit has one owner at a time: its owner holds its lock, and fn's
//     context is the lock's, so it ends, on a loss, before another member
//     can be granted the unit, with the clock drift and safety margin of
//     the lock allowed for (see distlock.Lock.Context).
//   - Unit.Token is strictly greater than every earlier owner's token of
//     the unit.
//   - After a change of membership, every unit is owned by its planned
//     member within the reconcile interval (plus 25% jitter), plus the
//     rest of its minimum hold for a unit that moves from one live member
//     to another (a change moves some units between members that stay),
//     or plus the TTL for a unit of a member that died or was cut off
//     (its locks lapse; on ZooKeeper they last the session timeout, not
//     the TTL: see package zklock), plus the time to be granted a lock. A member
//     gives up a unit as soon as its minimum hold has passed, not at its
//     next reconcile.
//   - Once membership stops changing, every unit is held by its planned
//     member, and shares differ by at most one unit.
//   - A member that loses its membership (its member lock) ends and
//     releases every unit, then joins again.
//
// # Not guaranteed
//
//   - That the owner is not paused between checking its context and
//     writing: a pause past its lock's end lets the next owner write too.
//     Only the storage can refuse the late write: pass Unit.Token with
//     every write and let a fence refuse an older token (see Fencing).
//   - That a unit is always owned: between a loss or a move and the next
//     grant, nobody owns it.
//   - That members agree on the assignment at every moment: see above.
//   - The backend's own limits: a service that loses its state can grant
//     a unit twice and reuse a token (see each backend's package
//     documentation).
//
// # Resources
//
// A member may hold, or wait for, every unit of its group plus its
// membership at once (a member alone owns every unit). Where a lock holds
// a connection or a session's slot, size it for that: pglock's session
// mode keeps a pool connection per lock, and the gateway allows 64 locks
// per session by default (gateway.WithMaxLocks); a member short of them
// waits, and owns fewer units than planned.
//
// # Durability
//
// A group keeps nothing of its own: its members and units are locks, and
// last as the backend's locks do (see the backend's Durability).
//
// # Waiting
//
// A member waits for a unit's lock as Acquire does, on the service's own
// signal, so a unit given up is granted to the waiting member at once. It
// learns of new and departed members by listing the group's members every
// reconcile interval (distlock.Client.List, bounded by the interval and at
// least a second): that listing is the only polling, one List per member
// per interval, whose cost is the backend's (a SCAN of the keyspace on
// Redis, a read of the directory on file://, a range read on etcd). Until
// its first listing succeeds a member takes no unit, and a failed listing
// changes nothing. The backend must list holders (driver.Lister), as
// every backend of this repository does.
//
// # Fencing
//
// Unit.Token is the unit lock's fencing token. Use one fence per unit
// (package fence's Register with the unit's name as the resource, or a
// backend's check-and-write helper with Unit.Lock), so that the storage
// refuses the writes of an earlier owner of the unit.
package partition
