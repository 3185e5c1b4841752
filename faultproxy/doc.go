// Package faultproxy is a TCP proxy for tests that can stall, delay, or cut
// the traffic between a client and a server, to cause the network faults a
// lock service must survive: a client cut off from its server, a slow link,
// a request whose reply is lost.
package faultproxy
