// Package discovery finds workers in DNS: it resolves the names given for
// each role (prefill, decode, fallback) every Interval and tells its owner
// how the set of workers changes, as a Change of workers added and removed.
// It only keeps the desired set: the owner (package lb) applies each Change
// through its one membership path, where a worker added is health-checked
// and warmed and a worker removed is drained (issue 23). The package
// imports no other pdlb package.
//
// The records read, for each NAME given as "NAME" or "NAME:PORT":
//
//   - SRV _http._tcp.NAME: when present, each target is resolved (A and
//     AAAA) and every address is a worker on the target's port. A
//     Kubernetes headless Service publishes these for a port named "http".
//   - A and AAAA of NAME, when there is no such SRV record: every address
//     is a worker on the PORT given with the name, or Config.Port.
//   - SRV _bootstrap._tcp.NAME, for prefills: the bootstrap port of the
//     worker whose address a target resolves to. Without it a prefill's
//     BootstrapPort is 0 and the owner learns the port as for a prefill
//     given without one on the command line.
//
// Workers are named by address, never by host name, and sorted, so that
// replicas given the same names and the same answers hold the same set and
// converge within one refresh of a DNS change.
//
// What is kept: a name whose lookups fail (a timeout, SERVFAIL, a server
// that cannot be reached), or whose answer is empty after a non-empty one,
// answers its last good workers instead, logged when that starts and stops
// and counted in Config.Kept, so that a DNS outage or a scale to zero
// never empties a pool; remove such workers through the worker API. A
// worker missing from every name's answer for RemoveAfter is removed; one
// that comes back sooner stays, unchanged.
//
// Lookups use Go's own resolver (net.Resolver with PreferGo), sent to
// Config.Server when set: it asks for SRV records like any other, over UDP
// and over TCP when an answer is truncated. It reads /etc/hosts first.
package discovery
