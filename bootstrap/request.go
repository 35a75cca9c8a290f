package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrNotJSON is wrapped by the error Parse returns for a body that is empty
// or not valid JSON.
var ErrNotJSON = errors.New("request body is not valid JSON")

// ErrNotObject is wrapped by the error Parse returns for a body that is valid
// JSON but not an object.
var ErrNotObject = errors.New("request body must be a JSON object")

// Request is what the load balancer needs to know about a client body.
// The zero value is not a parsed body: Parse sets Batch to -1 for a scalar one.
type Request struct {
	// Batch is the number of items when the body is a /generate batch (see
	// Parse), or -1 when it is not a batch. A batch may have 0 items.
	Batch int
	// Stream is true when "stream" is truthy.
	Stream bool
	// ReturnLogprob is true when "return_logprob" is truthy: mini_lb's
	// condition for merging logprobs into a stream.
	ReturnLogprob bool
	// HasReturnLogprob is true when the key "return_logprob" is present with
	// any value: mini_lb's condition for merging logprobs into a non-stream
	// answer.
	HasReturnLogprob bool
	// HasReturnRoutedExperts is true when the key "return_routed_experts" is
	// present with any value.
	HasReturnRoutedExperts bool

	// PrefillDPRank is the client's disagg_prefill_dp_rank, set when it is an
	// integer.
	PrefillDPRank DPRank
	// RoutedDPRank is the client's routed_dp_rank, or its deprecated alias
	// data_parallel_rank, under the same rules.
	RoutedDPRank DPRank

	// HasKVFields is true when the body has a top-level member that steers
	// the KV transfer, bootstrap_host, bootstrap_port, bootstrap_room or
	// do_local_prefill, under any spelling of its key. pdlb owns these
	// fields: Append replaces them and Strip removes them, so a body
	// without any may be forwarded as it is.
	HasKVFields bool

	// RID is where the raw value of the member "rid" is in the body: its
	// offset and length, both 0 when there is none. It is the rid the
	// workers run the request under (the last of duplicates): a string, or
	// for a batch a list of one rid per item.
	RID Span

	// RoutingKey is where the prompt is, as the cache-following routing
	// policies key on it (see routingkey.go); empty without a prompt.
	RoutingKey Span

	// PromptTokens estimates the prompt's length in tokens without a
	// tokenizer: the number of token ids when the prompt is given as ids
	// (input_ids, or an OpenAI prompt list of ids), else one token per four
	// bytes of text, prompt or messages. It is 0 for a batch or a body
	// without a prompt: unknown.
	PromptTokens int
}

// Parse reads what routing needs from body without decoding it and without
// allocating for a valid body. It does not keep body.
//
// The body must be a valid JSON object, optionally surrounded by whitespace,
// nested at most 1024 levels deep. The error for a body that is not an
// object wraps ErrNotObject, and ErrNotJSON as well when the body is not
// JSON either (empty, or a form's "text=hi"); the error for an object that
// is not valid JSON wraps ErrNotJSON. Top-level members are read as
// Python's json reads them: the last of duplicate keys wins, keys are compared after decoding escapes, and
// booleans follow Python's truthiness (false, null, 0, 0.0, "", [] and {} are
// false).
//
// Batch follows mini_lb's _get_request_batch_size: when "text" is present
// and not null, a list of n items makes a batch of n and anything else no
// batch; otherwise, when "input_ids" is a list whose first item is a list,
// it is a batch of as many items as the outer list. Whether a batch means
// anything depends on the route: only /generate takes batches.
func Parse(body []byte) (Request, error) {
	i := skipSpace(body, 0)
	if i == len(body) {
		return Request{}, &notObjectError{got: "an empty body", cause: errUnexpectedEnd}
	}
	if body[i] != '{' {
		return Request{}, notObject(body, i)
	}
	r, ranks, err := scanRequest(body)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %w", ErrNotJSON, err)
	}
	// The scan above has bounded the nesting depth, which the recursive
	// validators need, and checked everything but the scalars.
	if err := validate(body); err != nil {
		return Request{}, fmt.Errorf("%w: %w", ErrNotJSON, err)
	}
	if r.PrefillDPRank, err = dpRank("disagg_prefill_dp_rank", ranks.prefill); err != nil {
		return Request{}, err
	}
	// As SGLang's GenerateReqInput: the deprecated data_parallel_rank
	// counts only when routed_dp_rank is absent or null.
	routed, name := ranks.routed, "routed_dp_rank"
	if routed == nil || string(routed) == "null" {
		routed, name = ranks.alias, "data_parallel_rank"
	}
	if r.RoutedDPRank, err = dpRank(name, routed); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Span is where a slice of a body is: its offset and length.
type Span struct{ Start, Len int }

// Of returns the slice of body at s.
func (s Span) Of(body []byte) []byte { return body[s.Start : s.Start+s.Len] }

// rawRanks are the raw values of the DP-rank members, nil when absent. They
// are read once the body is known to be valid JSON.
type rawRanks struct {
	prefill, routed, alias []byte
}

// bytesPerToken is the rough size of a token in text: enough to tell a
// short prompt from a long one.
const bytesPerToken = 4

// promptTokens estimates the prompt's tokens from the raw values of the
// prompt members (nil when absent); see Request.PromptTokens.
func promptTokens(text, inputIDs, prompt, messages []byte) (int, error) {
	for _, v := range [][]byte{text, inputIDs, prompt, messages} {
		if v == nil || string(v) == "null" {
			continue
		}
		if v[0] != '[' || len(v) < 2 {
			return (len(v) + bytesPerToken - 1) / bytesPerToken, nil
		}
		i := skipSpace(v, 1)
		if v[i] == ']' {
			return 0, nil
		}
		if v[i] == '-' || v[i] >= '0' && v[i] <= '9' {
			n, _, err := listLen(v) // a list of token ids
			return n, err
		}
		if v[i] != '{' {
			// A list of prompts (texts, or lists of ids), an OpenAI one
			// included: a batch, whose size is not estimated.
			return 0, nil
		}
		return (len(v) + bytesPerToken - 1) / bytesPerToken, nil // messages
	}
	return 0, nil
}

func scanRequest(body []byte) (Request, rawRanks, error) {
	var r Request
	var ranks rawRanks
	ms, err := newMembers(body)
	if err != nil {
		return r, ranks, err
	}
	var text, inputIDs, prompt, messages promptMember
	for {
		m, ok, err := ms.next()
		if err != nil {
			return r, ranks, err
		}
		if !ok {
			break
		}
		k := fieldNamed(m.key)
		if m.escaped {
			k = escapedField(m.key)
		}
		switch k {
		case fieldText:
			text = promptMember{m.value, m.end - len(m.value)}
		case fieldInputIDs:
			inputIDs = promptMember{m.value, m.end - len(m.value)}
		case fieldStream:
			r.Stream = truthy(m.value)
		case fieldReturnLogprob:
			r.HasReturnLogprob = true
			r.ReturnLogprob = truthy(m.value)
		case fieldReturnRoutedExperts:
			r.HasReturnRoutedExperts = true
		case fieldPrefillDPRank:
			ranks.prefill = m.value
		case fieldRoutedDPRank:
			ranks.routed = m.value
		case fieldDataParallelRank:
			ranks.alias = m.value
		case fieldPrompt:
			prompt = promptMember{m.value, m.end - len(m.value)}
		case fieldMessages:
			messages = promptMember{m.value, m.end - len(m.value)}
		case fieldRID:
			r.RID = Span{Start: m.end - len(m.value), Len: len(m.value)}
		case fieldBootstrapHost, fieldBootstrapPort, fieldBootstrapRoom, fieldLocalPrefill:
			r.HasKVFields = true
		}
	}
	r.RoutingKey = routingKey(text, inputIDs, prompt, messages)
	if r.Batch, err = batchSize(text.value, inputIDs.value); err != nil || r.Batch >= 0 {
		return r, ranks, err
	}
	r.PromptTokens, err = promptTokens(text.value, inputIDs.value, prompt.value, messages.value)
	return r, ranks, err
}

// batchSize is mini_lb's _get_request_batch_size over the raw values of the
// last "text" and "input_ids" members, nil when absent. It returns -1 for a
// body that is not a batch.
func batchSize(text, inputIDs []byte) (int, error) {
	if text != nil && string(text) != "null" {
		if text[0] != '[' {
			return -1, nil
		}
		n, _, err := listLen(text)
		return n, err
	}
	if inputIDs != nil && inputIDs[0] == '[' {
		n, nested, err := listLen(inputIDs)
		if err != nil || !nested {
			return -1, err
		}
		return n, nil
	}
	return -1, nil
}

// ErrBadDPRank is wrapped by the error Parse returns for a DP-rank field
// that is neither an integer nor null.
var ErrBadDPRank = errors.New("invalid DP rank")

// dpRank reads a DP-rank member's raw value: an integer is a set rank;
// absence or null is no rank. As SGLang's pydantic models read an
// Optional[int] (lax mode), a float with no fraction, a string holding an
// integer and a boolean (1 or 0) are that integer too: the workers take
// them, so pdlb must not refuse what they would serve.
func dpRank(name string, raw []byte) (DPRank, error) {
	if raw == nil || string(raw) == "null" {
		return DPRank{}, nil
	}
	bad := func() (DPRank, error) {
		return DPRank{}, fmt.Errorf("%w: %s must be an integer rank, got %.20s", ErrBadDPRank, name, raw)
	}
	switch raw[0] {
	case '[':
		// Not a rank per batch item: SGLang types these fields
		// Optional[int] and gives a batch's every item the request's one
		// value (GenerateReqInput.__getitem__), so a list would fail inside
		// the workers, after pdlb had drawn rooms that ignore it.
		return DPRank{}, fmt.Errorf("%w: %s must be an integer rank, one for the whole request (the items of a batch share it), got a list", ErrBadDPRank, name)
	case 't':
		return DPRank{Set: true, Rank: 1}, nil
	case 'f':
		return DPRank{Set: true, Rank: 0}, nil
	case '"':
		if n, ok := parseRankString(raw[1 : len(raw)-1]); ok {
			return DPRank{Set: true, Rank: n}, nil
		}
		return bad()
	}
	if n, ok := parseRank(raw); ok {
		return DPRank{Set: true, Rank: n}, nil
	}
	if bytes.ContainsAny(raw, ".eE") {
		f, err := strconv.ParseFloat(string(raw), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1e9 {
			return DPRank{Set: true, Rank: int(f)}, nil
		}
	}
	return bad()
}

// parseRankString reads a rank written as a string, as pydantic-core reads
// an int from one: spaces around it, a sign, underscores between digits
// ("1_0"), and a fraction of zeros ("2.0") are allowed.
func parseRankString(s []byte) (int, bool) {
	s = bytes.TrimPrefix(bytes.TrimSpace(s), []byte("+"))
	if whole, frac, ok := bytes.Cut(s, []byte(".")); ok {
		if len(frac) == 0 || len(bytes.Trim(frac, "0")) > 0 {
			return 0, false
		}
		s = whole
	}
	if bytes.Contains(s, []byte("_")) {
		digits := make([]byte, 0, len(s))
		for i, c := range s {
			if c == '_' {
				if i == 0 || i == len(s)-1 || s[i-1] < '0' || s[i-1] > '9' || s[i+1] < '0' || s[i+1] > '9' {
					return 0, false
				}
				continue
			}
			digits = append(digits, c)
		}
		s = digits
	}
	return parseRank(s)
}

// parseRank reads an optionally negative integer of at most 9 digits.
func parseRank(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// field names the top-level members the package reads.
type field uint8

const (
	fieldOther field = iota
	fieldText
	fieldInputIDs
	fieldStream
	fieldReturnLogprob
	fieldReturnRoutedExperts
	fieldPrefillDPRank
	fieldRoutedDPRank
	fieldDataParallelRank
	fieldPrompt
	fieldMessages
	fieldRID
	// The fields that steer the KV transfer, which pdlb owns (Append,
	// Strip).
	fieldBootstrapHost
	fieldBootstrapPort
	fieldBootstrapRoom
	fieldLocalPrefill
)

// maxFieldLen is the length of the longest key fieldNamed recognises.
const maxFieldLen = len("disagg_prefill_dp_rank")

// escapedField identifies a raw key that holds escapes (member.escaped),
// decoded as the worker's json.loads decodes it ("str\u0065am" is
// "stream"). A field compared by its raw bytes would let a client show pdlb
// one value and the worker another: "bootstrap\u005fhost" once reached a
// decode past pdlb and pointed its KV handshake at an address of the
// client's choice. A key without escapes goes to fieldNamed as it is, which
// callers inline:
//
//	k := fieldNamed(m.key)
//	if m.escaped {
//		k = escapedField(m.key)
//	}
func escapedField(key []byte) field {
	var buf [maxFieldLen]byte
	n, ok := unescapeASCII(&buf, key)
	if !ok {
		return fieldOther
	}
	return fieldNamed(buf[:n])
}

// fieldNamed identifies a decoded key.
func fieldNamed(key []byte) field {
	switch string(key) {
	case "text":
		return fieldText
	case "input_ids":
		return fieldInputIDs
	case "stream":
		return fieldStream
	case "return_logprob":
		return fieldReturnLogprob
	case "return_routed_experts":
		return fieldReturnRoutedExperts
	case "disagg_prefill_dp_rank":
		return fieldPrefillDPRank
	case "routed_dp_rank":
		return fieldRoutedDPRank
	case "data_parallel_rank":
		return fieldDataParallelRank
	case "prompt":
		return fieldPrompt
	case "messages":
		return fieldMessages
	case "rid":
		return fieldRID
	case "bootstrap_host":
		return fieldBootstrapHost
	case "bootstrap_port":
		return fieldBootstrapPort
	case "bootstrap_room":
		return fieldBootstrapRoom
	case "do_local_prefill":
		return fieldLocalPrefill
	}
	return fieldOther
}

// unescapeASCII decodes the raw key into buf and returns its length. It gives
// up (false) on anything that cannot decode to one of the printable ASCII
// names fieldNamed looks for, or that is longer than buf.
func unescapeASCII(buf *[maxFieldLen]byte, raw []byte) (int, bool) {
	n := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' {
			if i+1 == len(raw) {
				return 0, false
			}
			i++
			switch raw[i] {
			case '"', '\\', '/':
				c = raw[i]
			case 'u':
				if i+4 >= len(raw) {
					return 0, false
				}
				r, ok := hex4(raw[i+1 : i+5])
				if !ok || r >= 0x80 {
					return 0, false
				}
				c = byte(r)
				i += 4
			default:
				return 0, false
			}
		}
		if n == len(buf) || c < 0x20 || c >= 0x80 {
			return 0, false
		}
		buf[n] = c
		n++
	}
	return n, true
}

func hex4(h []byte) (rune, bool) {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
