package lb

import (
	"io"
	"strconv"
)

// Once fasthttp has written a stream's headers with its first chunk, the
// relay frames the HTTP/1.1 chunks itself and writes them to the client's
// socket (relay.framing): this is socket-level framing, apart from the
// relay's event semantics, and goes with the socket layer (lb/wire).

const (
	// The relay frames each chunk it writes in its own buffer: the size
	// line goes in the chunkHeadroom bytes kept before the events (room
	// for any size a buffer can hold), what follows them in the
	// chunkTailroom bytes kept after the last one read: the chunk's
	// "\r\n", and after the last chunk the body's end.
	chunkHeadroom = 16
	chunkTailroom = len(chunkEnd) + len(lastChunk)
)

// chunkEnd ends a chunk's data; lastChunk ends a chunked body that has no
// trailers.
const (
	chunkEnd  = "\r\n"
	lastChunk = "0\r\n\r\n"
)

// writeChunk writes buf[from:to] to the client as one chunk, framed in
// place: its size line goes in the bytes before it (written already, or
// the headroom), its "\r\n" over the bytes after it, which are put back.
// fasthttp's own writer would copy the events into the connection's
// buffer first. With last, the chunk is the body's last, and the body's
// end goes with it: one write, where fasthttp would make it a second, and
// the client a second read. It returns how many of the events' bytes
// were written.
func (r *relay) writeChunk(from, to int, last bool) (int, error) {
	var line [chunkHeadroom]byte
	size := append(strconv.AppendInt(line[:0], int64(to-from), 16), chunkEnd...)
	head := from - len(size)
	copy(r.buf[head:], size)
	after := [chunkTailroom]byte(r.buf[to:])
	tail := copy(r.buf[to:], chunkEnd)
	if last {
		tail += copy(r.buf[to+tail:], lastChunk)
	}
	n, err := r.client.Write(r.buf[head : to+tail])
	copy(r.buf[to:], after[:])
	if last && err == nil {
		r.cc.lastChunkSent()
	}
	return min(max(n-len(size), 0), to-from), err
}

// ended reports whether the events just taken are the decode's last: it
// sent its [DONE] and the body's end with them, and nothing else is left.
// The relay may then send the body's end itself, with them.
func (r *relay) ended() bool {
	return r.readErr == io.EOF && r.sawDone && r.start == r.end && r.cc != nil
}
