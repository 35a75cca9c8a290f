package lb

import (
	"errors"
	"io"
	"sync"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// A body pdlb holds, a client's or a worker's answer, is read into a
// buffer that doubles as its bytes arrive, up to the length declared, if
// any: never allocated for what is declared before it comes, and linear in
// its size whether it comes in chunks or not. Each growth is taken from
// the server's body memory (Config.MaxBodyMemory) first.

// Body buffers up to maxPooledBody are pooled by size, a power of two from
// minPooledBody: most bodies fit the smallest, and a stream's client body
// is held until its first event (the handler's return), so at a thousand
// streams starting at once a buffer larger than the body would show in
// pdlb's memory. Answers of tens or hundreds of KiB (long generations,
// logprobs) reuse theirs, as they did in fasthttp's pools.
const (
	minPooledBody = 1 << 10
	maxPooledBody = 1 << 20
)

var bodyPools [11]sync.Pool // minPooledBody << i

// pooledBody takes a buffer of at least size bytes (at most maxPooledBody)
// from its pool, and returns it with its capacity.
func pooledBody(size int) (*[]byte, int) {
	i := 0
	for minPooledBody<<i < size {
		i++
	}
	if v := bodyPools[i].Get(); v != nil {
		return v.(*[]byte), minPooledBody << i
	}
	b := make([]byte, 0, minPooledBody<<i)
	return &b, minPooledBody << i
}

func putPooledBody(b *[]byte) {
	i := 0
	for minPooledBody<<i < cap(*b) {
		i++
	}
	bodyPools[i].Put(b)
}

// bodyBuffer is a body read into a buffer that grows with what arrived,
// and the body memory it holds. release gives everything back.
type bodyBuffer struct {
	buf []byte
	// pooled is buf's pool entry while buf is a pooled one.
	pooled *[]byte
	// held is the budget held for buf: its capacity.
	held int
}

// errNoBodyMemory is a body the body memory had no room for.
var errNoBodyMemory = errors.New("pdlb's memory for bodies is in use by other requests (--max-body-memory)")

// fill reads r, which holds declared bytes (-1: as many as it yields),
// into b, at most limit bytes, taking each growth from m first. framed,
// when not nil, is the client connection a chunked body is read from, its
// framing bounded (wire.ClientConn.LimitFraming). The error is fasthttp.ErrBodyTooLarge past
// limit, errNoBodyMemory when m has no room, io.ErrUnexpectedEOF for a
// body that ends before its declared length, or r's.
func (b *bodyBuffer) fill(r io.Reader, declared, limit int, m *bodyMemory, framed *wire.ClientConn) error {
	if framed != nil {
		framed.StartFramedBody()
		defer framed.EndFramedBody()
	}
	for declared < 0 || len(b.buf) < declared {
		if len(b.buf) == cap(b.buf) && !b.grow(declared, limit, m) {
			return errNoBodyMemory
		}
		if framed != nil {
			framed.LimitFraming(len(b.buf), cap(b.buf)-len(b.buf))
		}
		n, err := r.Read(b.buf[len(b.buf):cap(b.buf)])
		b.buf = b.buf[:len(b.buf)+n]
		switch {
		case len(b.buf) > limit:
			return fasthttp.ErrBodyTooLarge
		case err == io.EOF && declared >= 0 && len(b.buf) < declared:
			return io.ErrUnexpectedEOF // fasthttp's streams end a cut body so
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return nil
}

// grow makes room for more of b: twice the buffer, never beyond the
// declared length nor past limit+1 (the byte that tells a body is too
// large). It reports false when m has no room.
func (b *bodyBuffer) grow(declared, limit int, m *bodyMemory) bool {
	size := min(max(2*cap(b.buf), minPooledBody), limit+1)
	if declared >= 0 {
		size = min(size, declared)
	}
	return b.growTo(size, m)
}

// growTo makes b's buffer size bytes large, taking them from m first, from
// a pool while it is small. It reports false when m has no room.
func (b *bodyBuffer) growTo(size int, m *bodyMemory) bool {
	var pooled *[]byte
	if size <= maxPooledBody {
		pooled, size = pooledBody(size)
	}
	if !m.take(size) {
		if pooled != nil {
			putPooledBody(pooled)
		}
		return false
	}
	var grown []byte
	if pooled != nil {
		grown = (*pooled)[:0]
	} else {
		grown = make([]byte, 0, size)
	}
	grown = append(grown, b.buf...)
	b.releaseBuffer(m)
	b.buf, b.pooled, b.held = grown, pooled, size
	return true
}

// release gives b's memory back to the budget, and its chunk to the pool.
func (b *bodyBuffer) release(m *bodyMemory) {
	b.releaseBuffer(m)
	b.buf = nil
}

func (b *bodyBuffer) releaseBuffer(m *bodyMemory) {
	if b.pooled != nil {
		putPooledBody(b.pooled)
		b.pooled = nil
	}
	m.give(b.held)
	b.held = 0
}
