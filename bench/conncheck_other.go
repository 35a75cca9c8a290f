//go:build !unix

package bench

import "net"

// peerClosed cannot tell here, so a stale connection fails its request as
// it would with any other client that does not check.
func peerClosed(net.Conn) bool { return false }
