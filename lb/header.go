package lb

import (
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
