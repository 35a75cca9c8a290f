// Package bootstrap speaks SGLang's prefill/decode bootstrap protocol
// (shared/PROTOCOL.md §2–§5). It has two halves.
//
// The request half reads what routing needs from a client body and writes
// the bootstrap_host, bootstrap_port and bootstrap_room fields (and the
// DP-rank fields) that link one prefill worker and one decode worker to the
// same KV transfer. It is pure: bytes in, bytes out, no I/O and no package
// state, so every function is safe for concurrent use. Bodies are
// never decoded into maps: Parse scans the top-level members in place and
// Append splices the new members into a copy of the body, so every byte the
// client sent (number spellings, escapes, whitespace, member order) reaches
// the workers unchanged, and a typical request costs no allocations. Keys
// are compared as the workers' json.loads decodes them, the last duplicate
// winning, so that a client cannot show pdlb one request and the workers
// another; the fields that steer a KV transfer are pdlb's alone, which
// Append writes and Strip removes, under any spelling of the client's.
//
// A typical request path:
//
//	req, err := bootstrap.Parse(body) // 400 on error
//	rooms := []uint64{bootstrap.NewRoom()}
//	f := bootstrap.Fields{Host: host, Port: port, Rooms: rooms} // host from bootstrap.Host
//	buf, err = bootstrap.Append(buf[:0], body, f)
//
// The registry half talks to the prefills' bootstrap servers: Client reads
// one server's parallel info (dp_size, attn_tp_size, ...) and rank
// addresses in either API version, and Registry follows every prefill,
// learning its bootstrap port, refreshing what it knows, and publishing
// immutable States that the request path reads without a lock.
package bootstrap
