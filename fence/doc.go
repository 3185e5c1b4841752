// Package fence is the storage side of fencing tokens.
//
// A lock cannot stop a paused holder from waking up and writing: its lease
// may have expired and the key been granted to someone else while it slept.
// The storage must refuse it. Every grant carries a token larger than all
// earlier tokens for its key (distlock.Lock.Token); the storage remembers,
// per resource, the highest token it has admitted and refuses a lower one:
//
//	holder A gets token 33, then pauses
//	holder B gets token 34 and writes: admitted, highest is now 34
//	holder A wakes and writes with 33: refused with ErrStaleToken
//
// A token equal to the highest is admitted, so a holder can write more than
// once under one grant. This is why a fence is only as good as the lock
// service's promise that tokens are unique per grant: a service that hands
// the same token out twice (a Redis failover to a replica that missed a
// grant, a restart without fsync) defeats it, and a service whose counter
// went backwards makes the fence refuse the new holder.
//
// The check and the write must be one atomic step in the storage, or a pause
// between them reopens the hole. Register does this for state kept in this
// process (Admit under the caller's own lock, or Do). For data kept
// elsewhere, use the storage's own atomic check-and-write: the redislock,
// etcdlock and pglock packages provide helpers.
//
// Every guard has one shape: a constructor that takes what the guard
// writes through, if anything, and then options of this package (Option,
// WithMeterProvider): NewRegister(opts...),
// redislock.NewFence(client, prefix, opts...),
// etcdlock.NewFence(backend, opts...) and pglock.NewFence(opts...). Each
// counts the writes it refuses on one OpenTelemetry counter, through a
// Counter (NewCounter), which a guard of another package can use too:
//
//	distlock.fence.rejections  counter  {write}  distlock.guard: "fence.Register", "redislock.Fence", "etcdlock.Fence", "pglock.Fence"
package fence
