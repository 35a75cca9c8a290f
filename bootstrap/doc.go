// Package bootstrap speaks the request side of SGLang's prefill/decode
// bootstrap protocol: it reads what routing needs from a client body and
// writes the bootstrap_host, bootstrap_port and bootstrap_room fields that
// link one prefill worker and one decode worker to the same KV transfer
// (see shared/PROTOCOL.md §2).
//
// This half of the package is pure: bytes in, bytes out, no I/O and no
// package state, so every function is safe for concurrent use. Bodies are
// never decoded into maps: Parse scans the top-level members in place and
// Append splices the new members into a copy of the body, so every byte the
// client sent (number spellings, escapes, whitespace, member order) reaches
// the workers unchanged, and a typical request costs no allocations.
//
// A typical request path:
//
//	req, err := bootstrap.Parse(body) // 400 on error
//	rooms := []uint64{bootstrap.NewRoom()}
//	f := bootstrap.Fields{Host: host, Port: port, Rooms: rooms} // host from bootstrap.Host
//	buf, err = bootstrap.Append(buf[:0], body, f)
package bootstrap
