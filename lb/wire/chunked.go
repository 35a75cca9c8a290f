package wire

import (
	"bufio"
	"errors"
	"io"
	"net"
)

// A decode streams its events as an HTTP/1.1 chunked body, one chunk an
// event, and the relay passes each on as a chunk of its own. Through
// fasthttp's body stream, every event was read into the connection's
// bufio.Reader, parsed a byte at a time, then copied into the relay's
// buffer: at a thousand streams, each of these touches memory gone cold
// since the stream's last event, and that showed in the stream profile.
// chunkedBody reads the socket straight into the relay's buffer and strips
// the framing there, in place.

// ErrBrokenChunk is a body whose chunked framing is malformed.
var ErrBrokenChunk = errors.New("malformed chunked encoding")

// maxChunkSizeLine bounds a chunk's size line, extensions included, and
// each trailer line.
const maxChunkSizeLine = 4 << 10

// maxChunkSize bounds the size a chunk may declare (the relay caps events
// far lower); it keeps the size's arithmetic from overflowing.
const maxChunkSize = 1 << 40

// chunkState is where the decoder is in the framing.
type chunkState uint8

const (
	chunkSize      chunkState = iota // the size's hex digits
	chunkSizeWS                      // blanks after them
	chunkExtension                   // after a ';', up to the '\r'
	chunkSizeLF                      // the '\n' ending the size line
	chunkData                        // the chunk's bytes
	chunkDataCR                      // the "\r\n" after them
	chunkDataLF
	trailerLine   // the start of a trailer line, or of the final "\r\n"
	trailerField  // inside a trailer line
	trailerEndLF  // the '\n' of the final "\r\n"
	chunkBodyDone // the terminating chunk and its trailers are read
)

// readerPool takes back a connection's bufio.Reader; a fasthttp.HostClient
// is one.
type readerPool interface {
	ReleaseReader(*bufio.Reader)
}

// chunkedBody is the decoded body of a chunked response whose headers were
// read through br: it reads what br holds first, then, once br is drained
// and handed back to its pool, the connection itself. The zero value is
// unusable; start sets it up for one response.
type chunkedBody struct {
	conn  net.Conn
	br    *bufio.Reader
	brsOf readerPool

	state chunkState
	// left is the size being parsed (chunkSize) or the data bytes the
	// current chunk still has (chunkData).
	left int64
	// line counts the bytes of the current size or trailer line: in
	// chunkSize, the size's digits so far.
	line int
	// overread is set when bytes came after the body's end: the
	// connection is then in an unknown state and must not be reused.
	overread bool
	err      error
}

func (b *chunkedBody) start(conn net.Conn, br *bufio.Reader, brsOf readerPool) {
	if wc, ok := conn.(*workerConn); ok {
		// Its wrapping is for deadlines, set through the call's canceller;
		// reading past it saves a hop through memory gone cold.
		conn = wc.Conn
	}
	*b = chunkedBody{conn: conn, br: br, brsOf: brsOf}
}

// done reports whether the body was read to its end and nothing more: the
// connection may serve another request.
func (b *chunkedBody) done() bool {
	return b.state == chunkBodyDone && !b.overread
}

// releaseReader hands br back if it is still held.
func (b *chunkedBody) releaseReader() {
	if b.br != nil {
		b.brsOf.ReleaseReader(b.br)
		b.br = nil
	}
}

// Read fills p with body bytes. It returns io.EOF after the last one,
// io.ErrUnexpectedEOF if the connection ends before it, and ErrBrokenChunk
// on malformed framing.
func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := b.readRaw(p)
		k, derr := b.decode(p[:n])
		switch {
		case derr != nil:
			b.err = derr
		case b.state == chunkBodyDone:
			b.err = io.EOF
		case err == io.EOF:
			b.err = io.ErrUnexpectedEOF
		case err != nil:
			b.err = err
		}
		if k > 0 || b.err != nil {
			return k, b.err
		}
	}
}

// readRaw reads framed bytes into p: those br still buffers, then the
// connection's.
func (b *chunkedBody) readRaw(p []byte) (int, error) {
	if b.br != nil {
		if n := b.br.Buffered(); n > 0 {
			return b.br.Read(p[:min(n, len(p))])
		}
		b.releaseReader()
	}
	return b.conn.Read(p)
}

// decode strips the framing from the raw bytes in p, moving the data they
// carry to its front, and returns how many there are. Data only ever moves
// towards the front, so it never overwrites bytes still to be decoded.
func (b *chunkedBody) decode(p []byte) (int, error) {
	k := 0
	for i := 0; i < len(p); {
		if b.state == chunkData {
			m := int(min(b.left, int64(len(p)-i)))
			k += copy(p[k:], p[i:i+m])
			i += m
			if b.left -= int64(m); b.left == 0 {
				b.state = chunkDataCR
			}
			continue
		}
		if b.state == chunkBodyDone {
			b.overread = true
			return k, nil
		}
		if err := b.frameByte(p[i]); err != nil {
			return k, err
		}
		i++
	}
	return k, nil
}

// frameByte takes one byte of the framing.
func (b *chunkedBody) frameByte(c byte) error {
	switch b.state {
	case chunkSize, chunkSizeWS, chunkExtension, chunkSizeLF:
		return b.sizeLineByte(c)
	case chunkDataCR:
		return b.expect(c, '\r', chunkDataLF)
	case chunkDataLF:
		return b.expect(c, '\n', chunkSize)
	case trailerLine, trailerField, trailerEndLF:
		return b.trailerByte(c)
	}
	return nil
}

// expect takes the byte want, and moves on to next; any other is broken
// framing.
func (b *chunkedBody) expect(c, want byte, next chunkState) error {
	if c != want {
		return ErrBrokenChunk
	}
	b.state = next
	return nil
}

// sizeLineByte takes a byte of a chunk's size line: RFC 9112's
// chunk-size [ BWS ";" chunk-ext ] CRLF.
func (b *chunkedBody) sizeLineByte(c byte) error {
	switch b.state {
	case chunkSize:
		if d, ok := hexDigit(c); ok {
			if b.left = b.left<<4 | int64(d); b.left > maxChunkSize {
				return ErrBrokenChunk
			}
			return b.countLine()
		}
		if b.line == 0 {
			return ErrBrokenChunk // no digits
		}
		fallthrough
	case chunkSizeWS:
		switch c {
		case '\r':
			b.state = chunkSizeLF
		case ' ', '\t':
			b.state = chunkSizeWS
		case ';':
			b.state = chunkExtension
		default:
			return ErrBrokenChunk
		}
		return b.countLine()
	case chunkExtension:
		switch c {
		case '\r':
			b.state = chunkSizeLF
		case '\n':
			// A bare newline in a size line is how requests are
			// smuggled past proxies that read it differently.
			return ErrBrokenChunk
		}
		return b.countLine()
	}
	// chunkSizeLF: the line's end, then the chunk's data or, after the
	// last chunk, its trailers.
	if c != '\n' {
		return ErrBrokenChunk
	}
	b.line = 0
	if b.left == 0 {
		b.state = trailerLine
	} else {
		b.state = chunkData
	}
	return nil
}

// trailerByte takes a byte of the trailers that follow the last chunk, or
// of the empty line that ends them.
func (b *chunkedBody) trailerByte(c byte) error {
	switch b.state {
	case trailerLine:
		if c == '\r' {
			b.state = trailerEndLF
			return nil
		}
		b.state = trailerField
		return b.countLine()
	case trailerField:
		if c == '\n' {
			b.state, b.line = trailerLine, 0
			return nil
		}
		return b.countLine()
	}
	return b.expect(c, '\n', chunkBodyDone) // trailerEndLF
}

// countLine counts a byte of a size or trailer line against its bound.
func (b *chunkedBody) countLine() error {
	if b.line++; b.line > maxChunkSizeLine {
		return ErrBrokenChunk
	}
	return nil
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
