// Package redlock is a distlock.Backend over N independent Redis servers
// (no replication between them, usually 3 or 5): a grant needs the votes
// of a majority, so that the lock survives the loss of a minority of the
// servers, and every grant carries a fencing token that increases across
// grants although the servers share nothing.
package redlock
