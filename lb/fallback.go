package lb

import (
	"bytes"
	"strconv"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// An SGLang decode refuses every request without a bootstrap room (a 400,
// "Disaggregated request received without bootstrap room id"): it has no
// decode-only path. Traffic that should skip remote prefill goes to the
// fallback pool of aggregated workers, forwarded as the client sent it, or,
// with --decode-local-prefill, to a decode that prefills it itself (SGLang
// PR #34773; /generate only).

// decodeOnly is why a request skips remote prefill. It labels
// pdlb_decode_only_total, so the set is closed.
type decodeOnly int

const (
	pdMode decodeOnly = iota
	// noPrefill: no prefill worker is usable (all down, or unreachable).
	noPrefill
	// noDecode: no decode worker is usable.
	noDecode
	// shortPrompt: the prompt is below --pd-min-prompt-tokens, where a
	// remote prefill costs more than it saves.
	shortPrompt
	// asked: the client (or an upstream router's decider) asked for it
	// with the X-PD-Mode header.
	asked
	numDecodeOnly
)

var decodeOnlyNames = [numDecodeOnly]string{
	pdMode:      "pd",
	noPrefill:   "no_prefill",
	noDecode:    "no_decode",
	shortPrompt: "short_prompt",
	asked:       "header",
}

func (w decodeOnly) String() string { return decodeOnlyNames[w] }

// headerPDMode lets a client or an upstream router choose the mode of a
// request: "decode-only", or "pd". Without it, --pd-min-prompt-tokens may
// choose decode-only.
const headerPDMode = "X-PD-Mode"

// noRoomMarker is how a decode refuses a request without a room.
var noRoomMarker = []byte("Disaggregated request received without bootstrap room id")

// decodeOnlyReason says whether q skips remote prefill by its own choice
// (header) or by its size (--pd-min-prompt-tokens).
func (s *Server) decodeOnlyReason(q *clientRequest) (decodeOnly, *answerError) {
	switch mode := q.ctx.Request.Header.Peek(headerPDMode); {
	case len(mode) == 0:
	case bytes.EqualFold(mode, []byte("pd")):
		return pdMode, nil // the upstream decider's choice, short prompt or not
	case bytes.EqualFold(mode, []byte("decode-only")):
		return asked, nil
	default:
		return pdMode, &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest,
			headerPDMode + " must be pd or decode-only, got " + strconv.Quote(string(mode))}
	}
	if n := q.info.PromptTokens; s.cfg.PDMinPromptTokens > 0 && n > 0 && n < s.cfg.PDMinPromptTokens {
		return shortPrompt, nil
	}
	return pdMode, nil
}

// serveDecodeOnly answers q without remote prefill: on a decode that
// prefills locally when allowed, else on a fallback worker, trying others
// while workers cannot be reached. With nowhere to go, the client gets a 503
// that names the empty pool.
func (s *Server) serveDecodeOnly(q *clientRequest, why decodeOnly) {
	for attempt := 0; ; attempt++ {
		b, local := s.pickDecodeOnly(q, why)
		if b == nil {
			s.answerError(q, s.nowhereToGo(q, why))
			return
		}
		held := len(q.body) + bootstrap.MaxAdded("", -1) // do_local_prefill, or the body as it is
		if !s.memory.take(held) {
			s.answerError(q, s.memory.exhausted())
			return
		}
		if attempt == 0 { // counted once it goes somewhere: a 503 skipped nothing
			s.decodeOnly[why].Inc()
		}
		x := s.newExchange(q, 2)
		x.held = held
		x.local = local
		// A decode that refuses local prefill is worth another attempt
		// only where there is another place to go.
		x.mayRetry = attempt < s.cfg.MaxRetries && (!local || len(s.fallbacks.backends()) > 0)
		x.body = decodeOnlyBody(x.body[:0], q, local)
		x.decode.prepare(q.ctx, b, x.body, q.deadline, q.id)
		out := x.serve(q)
		x.unref() // the handler's reference (see exchange)
		switch out.retry {
		case answered:
			return
		case retryRefusedNoRoom:
			s.localPrefillUnsupported(b)
		default:
			s.retries.Inc()
			q.remember(out)
		}
	}
}

// decodeOnlyBody appends to dst the body q sends without remote prefill: on
// a decode, marked for local prefill; on a fallback worker, the client's.
// Either way without the fields that steer a KV transfer, under any
// spelling (issue 19): a decode given a client's bootstrap_host would
// fetch its KV from wherever the client said, and fail for everyone once
// that address failed its heartbeats.
func decodeOnlyBody(dst []byte, q *clientRequest, local bool) []byte {
	if local {
		return mustAppend(dst, q.body, bootstrap.Fields{LocalPrefill: true})
	}
	if !q.info.HasKVFields {
		return append(dst, q.body...)
	}
	out, err := bootstrap.Strip(dst, q.body)
	if err != nil {
		panic("BUG: cannot strip bootstrap fields from a parsed body: " + err.Error())
	}
	return out
}

// pickDecodeOnly chooses where a decode-only request goes: a decode that
// prefills locally (/generate only, when enabled and supported), else a
// fallback worker.
func (s *Server) pickDecodeOnly(q *clientRequest, why decodeOnly) (b *Backend, local bool) {
	if s.cfg.DecodeLocalPrefill && !s.noLocalPrefill.Load() && q.rt.path == "/generate" && why != noDecode {
		if d := q.pick(s.decodes, q.decodeRank); d != nil {
			return d, true
		}
	}
	// The fallback workers' DP ranks are their own business: pdlb sends
	// them the client's request as it is.
	return q.pick(s.fallbacks, -1), false
}

// localPrefillUnsupported turns local prefill off after a decode refused it:
// the decode lacks SGLang PR #34773 or its conditional-aggregation flag. It
// is a configuration error, logged as such once.
func (s *Server) localPrefillUnsupported(d *Backend) {
	if s.noLocalPrefill.CompareAndSwap(false, true) {
		now := "decode-only traffic now goes to the fallback pool"
		if len(s.fallbacks.backends()) == 0 {
			now = "decode-only traffic now gets a 503, as no fallback pool is configured (--fallback)"
		}
		d.log.Error().Msg("the decode refused a local-prefill request for lacking a bootstrap room: it does not support " +
			"do_local_prefill (SGLang PR #34773, decode flag --disaggregation-decode-enable-conditional-agg); " +
			now + "; drop --decode-local-prefill or upgrade the decodes")
	}
}

// nowhereToGo is the 503 for a decode-only request that has no worker.
func (s *Server) nowhereToGo(q *clientRequest, why decodeOnly) *answerError {
	var msg string
	switch why {
	case noPrefill:
		msg = "no prefill backend is available" + s.whyPoolOut(s.prefills)
	case noDecode:
		msg = "no decode backend is available" + s.whyPoolOut(s.decodes)
	default:
		msg = "the request is decode-only (" + why.String() + ")"
	}
	if len(s.fallbacks.backends()) == 0 {
		msg += ", and no fallback backend is configured (--fallback)"
	} else {
		msg += ", and no fallback backend is available" + s.whyPoolOut(s.fallbacks)
	}
	if s.cfg.DecodeLocalPrefill && s.noLocalPrefill.Load() {
		msg += "; the decodes cannot prefill locally (they lack SGLang PR #34773)"
	}
	if q.why != "" {
		msg += " (" + q.why + ")"
	}
	return &answerError{fasthttp.StatusServiceUnavailable, reasonNoBackend, msg}
}

// refusedNoRoom explains a decode's "without bootstrap room id" refusal,
// which pdlb must never cause: it means a configuration error.
func (x *exchange) refusedNoRoom() string {
	d := x.decode.backend
	if x.local {
		return "decode backend " + d.addr + " refused a request without a bootstrap room: it does not support " +
			"local prefill (SGLang PR #34773 with --disaggregation-decode-enable-conditional-agg); drop --decode-local-prefill"
	}
	return "decode backend " + d.addr + " says the request had no bootstrap room, but pdlb sent one: " +
		"check that " + d.url + " is an SGLang decode reached directly, not through a proxy that rewrites bodies"
}
