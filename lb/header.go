package lb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// tokenChars marks the bytes of an RFC 9110 token (§5.6.2): the visible
// ASCII characters but the delimiters "(),/:;<=>?@[\]{} and DQUOTE. A table,
// as every request's header names are checked against it.
var tokenChars = func() (t [256]bool) {
	for c := '!'; c <= '~'; c++ {
		t[c] = true
	}
	for _, c := range []byte(`"(),/:;<=>?@[\]{}`) {
		t[c] = false
	}
	return t
}()

// isToken reports whether name is an RFC 9110 token, which a field name
// must be (§5.1).
func isToken[T string | []byte](name T) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !tokenChars[name[i]] {
			return false
		}
	}
	return true
}

// badHeaderName returns the first of h's names that is not a token, nil if
// all are. fasthttp reads "X Evil: 1" or "Content Length: 5" as headers and
// would forward them; a worker, or a proxy between, may read such a line
// otherwise than pdlb did (RFC 9112 §5.1 says to reject it).
func badHeaderName(h *fasthttp.RequestHeader) []byte {
	for name := range h.All() {
		if !isToken(name) {
			return name
		}
	}
	return nil
}

// refuseBadHeader answers a request with a header name that is not a
// token, accounted under rt (nil for a path pdlb does not serve).
func (s *Server) refuseBadHeader(ctx *fasthttp.RequestCtx, rt *route, name, requestID []byte, start time.Time) {
	path := string(ctx.Path())
	if rt == nil {
		rt = s.notFound
	} else {
		path = rt.path
	}
	msg := "invalid header name " + strconv.Quote(string(name)) + ": a field name is a token of RFC 9110 (letters, digits and !#$%&'*+-.^_`|~, no spaces)"
	s.refuse(ctx, rt, path, requestID, start, fasthttp.StatusBadRequest, reasonInvalidRequest, msg)
}

// headerRequestID carries a request's ID to its workers and back to its
// client.
var headerRequestID = []byte("X-Request-Id")

// setRequestID takes the request ID from the first of the request-ID
// headers (Config.RequestIDHeaders) the client sent a sane one in, else
// draws a random one; it answers it as X-Request-Id, and returns it. The
// bytes live in the request or response header, so they are valid until
// the handler returns.
func (s *Server) setRequestID(ctx *fasthttp.RequestCtx) []byte {
	for _, name := range s.requestIDHeaders {
		if id := ctx.Request.Header.PeekBytes(name); len(id) > 0 && len(id) <= 128 && printable(id) {
			ctx.Response.Header.SetBytesKV(headerRequestID, id)
			return id
		}
	}
	var raw [8]byte
	binary.LittleEndian.PutUint64(raw[:], rand.Uint64())
	var id [16]byte
	hex.Encode(id[:], raw[:])
	ctx.Response.Header.SetBytesKV(headerRequestID, id[:])
	return ctx.Response.Header.PeekBytes(headerRequestID)
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// unforwarded are the headers a call never takes from its client: the
// hop-by-hop ones of RFC 9110 §7.6.1, which a proxy must not forward, and
// Accept-Encoding, as pdlb reads and merges answers and so needs them
// uncompressed. Connection comes first: its bit in stripUnforwarded's mask
// also stands for the headers it names.
var unforwarded = [][]byte{
	[]byte(fasthttp.HeaderConnection), []byte("Proxy-Connection"), []byte("Keep-Alive"),
	[]byte("Proxy-Authenticate"), []byte("Proxy-Authorization"), []byte("Te"), []byte("Trailer"),
	[]byte("Transfer-Encoding"), []byte("Upgrade"), []byte("Expect"), []byte(fasthttp.HeaderAcceptEncoding),
}

// stripUnforwarded deletes from h the unforwarded headers, and those the
// client's Connection header names as hop-by-hop, and every X-Request-Id
// when the client sent more than one: the call then sets pdlb's own
// (call.target), whose SetBytesKV replaces the first one only, and a
// second reached the workers as the client wrote it. It finds which are
// there in one pass first: a request holds one or two of them at most, and
// each Del costs more than the pass (it normalizes the name and scans every
// header), which showed in the profile of the non-stream path.
func stripUnforwarded(h *fasthttp.RequestHeader) {
	var present uint32
	requestIDs := 0
	for key := range h.All() {
		if len(key) == len(headerRequestID) && bytes.EqualFold(key, headerRequestID) {
			requestIDs++
			continue
		}
		for i, name := range unforwarded {
			if len(key) == len(name) && bytes.EqualFold(key, name) {
				present |= 1 << i
				break
			}
		}
	}
	if requestIDs > 1 {
		h.DelBytes(headerRequestID)
	}
	if present == 0 {
		return
	}
	if present&1 != 0 {
		for name := range bytes.SplitSeq(h.Peek(fasthttp.HeaderConnection), []byte(",")) {
			if name = bytes.TrimSpace(name); len(name) > 0 {
				h.DelBytes(name)
			}
		}
	}
	for i, name := range unforwarded {
		if present&(1<<i) != 0 {
			h.DelBytes(name)
		}
	}
}
