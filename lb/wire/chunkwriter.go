package wire

import (
	"io"
	"strconv"
)

// Once fasthttp has written a stream's headers with its first chunk, a
// relay may frame the HTTP/1.1 chunks itself and write them to the
// client's socket, straight from its own buffer: fasthttp's writer would
// copy them into the connection's buffer first.

const (
	// A relay frames each chunk it writes in its own buffer: the size line
	// goes in the ChunkHeadroom bytes kept before the data (room for any
	// size a buffer can hold), what follows it in the ChunkTailroom bytes
	// kept after: the chunk's "\r\n", and after the last chunk the body's
	// end.
	ChunkHeadroom = 16
	ChunkTailroom = len(chunkEnd) + len(lastChunk)
)

// chunkEnd ends a chunk's data; lastChunk ends a chunked body that has no
// trailers.
const (
	chunkEnd  = "\r\n"
	lastChunk = "0\r\n\r\n"
)

// WriteChunk writes buf[from:to] to w as one chunk, framed in place: its
// size line goes in the bytes before it (written already, or the
// headroom), its "\r\n" over the bytes after it, which are put back. With
// last, the chunk is the body's last, and the body's end goes with it: one
// write, where fasthttp would make it a second, and the client a second
// read (the ClientConn must then be told: LastChunkSent). It returns how
// many of the data bytes were written.
func WriteChunk(w io.Writer, buf []byte, from, to int, last bool) (int, error) {
	var line [ChunkHeadroom]byte
	size := append(strconv.AppendInt(line[:0], int64(to-from), 16), chunkEnd...)
	head := from - len(size)
	copy(buf[head:], size)
	after := [ChunkTailroom]byte(buf[to:])
	tail := copy(buf[to:], chunkEnd)
	if last {
		tail += copy(buf[to+tail:], lastChunk)
	}
	n, err := w.Write(buf[head : to+tail])
	copy(buf[to:], after[:])
	return min(max(n-len(size), 0), to-from), err
}
