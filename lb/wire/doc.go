// Package wire is pdlb's socket and HTTP/1.1 layer under fasthttp: what a
// pairing proxy needs of its connections that fasthttp does not give. It
// knows nothing of prefill, decode or SGLang.
//
// On the worker side, Transport is the RoundTripper of the worker
// HostClients. Each request is bound to a Call (Bind), whose Leg carries
// its deadlines, a Canceller that lets another goroutine abort it by
// closing its connection, and a streamed answer's body, which outlives the
// round trip: an event stream's chunked body is decoded in place, straight
// from the socket into the reader's buffer. A request that dies on a
// pooled connection the worker had closed is resent once (RetryStaleConn),
// unless the Call says otherwise. A Dialer reaches the workers (TCP over
// IPv4 and IPv6, with a short DNS cache), and Dialers runs each worker's
// dials on goroutines of its own, so that a burst of new streams does not
// grow every handler's stack. A worker connection sends each request with
// the first read of its answer, which saves a system call a leg.
//
// On the client side, Listener wraps each accepted connection in a
// ClientConn, admitted into a connection Budget (which closes connections
// that wait for their clients to make room, and refuses the rest) and
// accepted again after a shortage of descriptors. A ClientConn reads each
// request at once although fasthttp asks for its first byte alone, bounds
// the framing of a chunked body, sends a large answer's two writes in one,
// and can be watched for its client going away while a handler waits
// (Watch, Watcher, WatchClient). WriteChunk frames a relayed stream's
// chunks in place, in the relay's own buffer.
//
// Deadlines on both sides are rounded up to steps of DeadlineStep (Steps),
// so that a connection keeps the deadline it has from one request to the
// next instead of moving it each time.
//
// Parts of this layer lean on how fasthttp writes: an answer larger than
// its write buffer comes in two writes, the first of exactly
// ClientWriteBufferSize bytes (ClientConn.HoldLargeAnswer); fasthttp writes
// a chunked body's end after its body stream, which a ClientConn drops
// once the relay has sent it (LastChunkSent). Connections without a
// descriptor (in-memory ones in tests) take the plain paths.
package wire
