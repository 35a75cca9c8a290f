package fake

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// route is one of the three generate routes.
type route uint8

const (
	routeGenerate route = iota
	routeCompletions
	routeChat
)

// request is a parsed generate request. Everything the answer needs is
// copied out of the body, because a stream is written after the handler
// returns and the body is gone.
type request struct {
	route        route
	rid          string // the request's id: its first item's on /generate
	model        string
	stream       bool
	includeUsage bool // OpenAI stream_options.include_usage
	list         bool // a /generate batch or n>1: the answer is a JSON list
	created      int64
	start        time.Time
	items        []item
}

// item is one generation of a request: a prompt of a batch, or one of its
// n samples. Item i of a request with a scalar bootstrap_room uses room+i,
// on both legs alike, as SGLang does; items are ordered prompt-major.
type item struct {
	rid           string
	index         int
	first         bool // first sample of its prompt: usage counts the prompt once
	promptTokens  int
	inputIDs      []int // the prompt's token ids, kept only when logprobs are asked
	maxTokens     int
	logprob       bool
	host          string // bootstrap_host; "None" when null, as Python prints it
	port          int    // bootstrap_port; 0 when null
	room          uint64
	hasRoom       bool
	local         bool     // prefilled by the decode itself (do_local_prefill, local.go)
	routedDPRank  int      // routed_dp_rank (or data_parallel_rank); noRank when absent
	prefillDPRank int      // disagg_prefill_dp_rank; noRank when absent
	dpRank        int      // the DP rank of this server that serves the item, set by dispatch
	blocks        []uint64 // the prompt's chained block hashes, when the server caches (tokens.go)
	cached        int      // prompt tokens found cached: by this server, or by the prefill (PD)
	reserved      int      // KV tokens held on its rank (model.go), 0 once released
}

// noRank marks an absent DP-rank field. Any integer a client sends, -1
// included, is a rank to check or to fail on, as in SGLang.
const noRank = math.MinInt

// badRequest is a client error answered 400 in the route's error shape.
type badRequest string

func (e badRequest) Error() string { return string(e) }

// HeaderDPRank is the header SGLang's OpenAI routes take as routed_dp_rank,
// over the body's.
const HeaderDPRank = "X-Data-Parallel-Rank"

// applyDPRankHeader gives every item of an OpenAI request the rank of an
// X-Data-Parallel-Rank header, as SGLang does; /generate ignores it.
func applyDPRankHeader(r *request, header []byte) error {
	if header == nil || r.route == routeGenerate {
		return nil
	}
	rank, err := strconv.Atoi(strings.TrimSpace(string(header)))
	if err != nil {
		return badRequest("Invalid X-Data-Parallel-Rank header: must be an integer, got '" + string(header) + "'")
	}
	for i := range r.items {
		r.items[i].routedDPRank = rank
	}
	return nil
}

// parse reads body into a request. Errors are badRequest.
func (s *Server) parse(rt route, body []byte) (*request, error) {
	p := s.parsers.Get()
	defer s.parsers.Put(p)
	// Python's json.loads takes UTF-8 bytes behind a byte-order mark.
	v, err := loadJSON(p, bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	if err != nil {
		return nil, badRequest("JSON decode error: " + err.Error())
	}
	if v.Type() != fastjson.TypeObject {
		return nil, badRequest("Input should be a valid dictionary or object to extract fields from")
	}
	now := time.Now()
	r := &request{route: rt, start: now, created: now.Unix(), stream: pydanticBool(v.Get("stream"))}
	r.model = s.cfg.Model
	if m := v.GetStringBytes("model"); len(m) > 0 {
		r.model = string(m)
	}
	r.includeUsage = truthy(v.Get("stream_options", "include_usage"))
	prompts, batch, err := promptsOf(rt, v, s.hashPageSize())
	if err != nil {
		return nil, err
	}
	if err := s.expand(r, v, prompts); err != nil {
		return nil, err
	}
	r.list = rt == routeGenerate && (batch || len(r.items) > 1)
	r.rid = r.items[0].rid
	return r, nil
}

// expand turns prompts into items, n samples each.
func (s *Server) expand(r *request, v *fastjson.Value, prompts []prompt) error {
	ridBase := ""
	if r.route != routeGenerate {
		ridBase = string(v.GetStringBytes("rid"))
		if ridBase == "" {
			ridBase = s.newRID(r.route)
		}
	}
	for p, pr := range prompts {
		n, err := samples(r.route, v, p)
		if err != nil {
			return err
		}
		for j := 0; j < n; j++ {
			it := item{index: len(r.items), first: j == 0, promptTokens: pr.tokens, blocks: pr.blocks, prefillDPRank: noRank}
			if err := s.fillItem(&it, r, v, p, j); err != nil {
				return err
			}
			it.rid = s.itemRID(r.route, v, p, j, it.index, ridBase)
			if it.logprob && pr.ids != nil {
				it.inputIDs = intsOf(pr.ids)
			}
			r.items = append(r.items, it)
		}
	}
	return nil
}

// fillItem reads the per-item fields of prompt p, sample j.
func (s *Server) fillItem(it *item, r *request, v *fastjson.Value, p, j int) error {
	var err error
	if it.maxTokens, err = maxTokens(r.route, v, p, s.cfg.Tokens); err != nil {
		return err
	}
	if r.route == routeGenerate {
		it.logprob = truthy(at(v.Get("return_logprob"), p))
	}
	it.routedDPRank = optRank(at(v.Get("routed_dp_rank"), p))
	if it.routedDPRank == noRank {
		it.routedDPRank = optRank(at(v.Get("data_parallel_rank"), p)) // the deprecated alias
	}
	if s.cfg.Role == RoleAggregated {
		return nil // a server without disaggregation ignores bootstrap fields
	}
	if err := fillBootstrap(it, v, p, j); err != nil {
		return err
	}
	it.local = s.localPrefill(r.route, v, p)
	return nil
}

// fillBootstrap reads the PD fields of prompt p, sample j.
func fillBootstrap(it *item, v *fastjson.Value, p, j int) error {
	it.host = "None"
	if h := at(v.Get("bootstrap_host"), p); h != nil && h.Type() == fastjson.TypeString {
		it.host = string(h.GetStringBytes())
	}
	var err error
	if it.port, err = portOf(at(v.Get("bootstrap_port"), p)); err != nil {
		return err
	}
	if it.room, it.hasRoom, err = roomOf(v.Get("bootstrap_room"), p, j, it.index); err != nil {
		return err
	}
	it.prefillDPRank = optRank(at(v.Get("disagg_prefill_dp_rank"), p))
	return nil
}

// samples is n for prompt p: sampling_params.n on /generate, n on OpenAI
// routes; 1 when absent.
func samples(rt route, v *fastjson.Value, p int) (int, error) {
	nv := v.Get("n")
	if rt == routeGenerate {
		nv = at(v.Get("sampling_params"), p).Get("n")
	}
	n, ok, err := intField(nv)
	if err != nil || (ok && n < 1) {
		return 0, badRequest("n must be a positive integer")
	}
	if !ok {
		return 1, nil
	}
	return n, nil
}

// maxTokens is the number of tokens to generate for prompt p.
func maxTokens(rt route, v *fastjson.Value, p, dflt int) (int, error) {
	var mv *fastjson.Value
	switch rt {
	case routeGenerate:
		mv = at(v.Get("sampling_params"), p).Get("max_new_tokens")
	case routeCompletions:
		mv = v.Get("max_tokens")
	default:
		if mv = v.Get("max_completion_tokens"); mv == nil || mv.Type() == fastjson.TypeNull {
			mv = v.Get("max_tokens")
		}
	}
	n, ok, err := intField(mv)
	if err != nil || n < 0 {
		return 0, badRequest("max tokens must be a non-negative integer")
	}
	if !ok {
		return max(dflt, 0), nil
	}
	return n, nil
}

// roomOf reads bootstrap_room for prompt p, sample j, item i: a list gives
// list[p]+j, a scalar gives room+i. Null or absent means no room.
func roomOf(rv *fastjson.Value, p, j, i int) (uint64, bool, error) {
	off := uint64(i)
	if rv != nil && rv.Type() == fastjson.TypeArray {
		rv, off = at(rv, p), uint64(j)
	}
	if rv == nil || rv.Type() == fastjson.TypeNull {
		return 0, false, nil
	}
	// Uint64 parses the literal itself: a room never goes through float64.
	room, err := rv.Uint64()
	if err != nil {
		return 0, false, badRequest("bootstrap_room must be a non-negative integer")
	}
	return room + off, true, nil
}

// portOf reads a bootstrap_port: null or absent is 0.
func portOf(pv *fastjson.Value) (int, error) {
	port, ok, err := intField(pv)
	if err != nil || (ok && (port < 0 || port > 65535)) {
		return 0, badRequest("bootstrap_port must be an integer port or null")
	}
	return port, nil
}

// at returns element p of an array value, or v itself when it is no array.
// It returns nil for a missing element; fastjson methods accept nil.
func at(v *fastjson.Value, p int) *fastjson.Value {
	if v == nil || v.Type() != fastjson.TypeArray {
		return v
	}
	a := v.GetArray()
	if p >= len(a) {
		return nil
	}
	return a[p]
}

// intField reads an optional integer: ok is false for null or absent.
func intField(v *fastjson.Value) (n int, ok bool, err error) {
	if v == nil || v.Type() == fastjson.TypeNull {
		return 0, false, nil
	}
	n, err = v.Int()
	return n, err == nil, err
}

// optInt reads an optional integer, dflt when absent or invalid.
func optInt(v *fastjson.Value, dflt int) int {
	n, ok, err := intField(v)
	if !ok || err != nil {
		return dflt
	}
	return n
}

// optRank reads an optional DP rank as SGLang's pydantic models read an
// Optional[int] (lax mode): an integer, a float with no fraction, a
// boolean, or a string holding an integer ("2", " 2 ", "2.0"). Anything
// else, or nothing, is noRank.
func optRank(v *fastjson.Value) int {
	if v == nil {
		return noRank
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return 1
	case fastjson.TypeFalse:
		return 0
	case fastjson.TypeNumber:
		if f := v.GetFloat64(); f == math.Trunc(f) && math.Abs(f) < 1e9 {
			return int(f)
		}
	case fastjson.TypeString:
		s := strings.TrimSpace(string(v.GetStringBytes()))
		if whole, frac, ok := strings.Cut(s, "."); ok && frac != "" && strings.Trim(frac, "0") == "" {
			s = whole // "2.0"
		}
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return noRank
}

// intsOf copies a list of token ids.
func intsOf(v *fastjson.Value) []int {
	a := v.GetArray()
	ids := make([]int, len(a))
	for i, e := range a {
		ids[i] = e.GetInt()
	}
	return ids
}

// truthy follows Python truthiness for the JSON values SGLang flags take:
// true, a non-zero number, a non-empty string or list.
func truthy(v *fastjson.Value) bool {
	if v == nil {
		return false
	}
	switch v.Type() {
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeNumber:
		return v.GetFloat64() != 0
	case fastjson.TypeString:
		return len(v.GetStringBytes()) > 0
	case fastjson.TypeArray:
		return len(v.GetArray()) > 0
	case fastjson.TypeObject:
		return v.GetObject().Len() > 0
	}
	return false
}

// pydanticBool reads a bool field as SGLang's pydantic models do (lax
// mode): the strings "false", "no", "off", "f", "n" and "0", in any case,
// are false, as a JSON false or 0 is ("stream": "false" is no stream);
// other values follow truthy, where pydantic would refuse most of them.
func pydanticBool(v *fastjson.Value) bool {
	if v != nil && v.Type() == fastjson.TypeString {
		switch strings.ToLower(string(v.GetStringBytes())) {
		case "false", "no", "off", "f", "n", "0":
			return false
		}
	}
	return truthy(v)
}

// itemRID is the rid of an item: on /generate the body's rid (scalar or
// list) or a fresh one; on OpenAI routes the request's rid. Samples after
// the first get "-<index>" appended so each in-flight rid is unique.
func (s *Server) itemRID(rt route, v *fastjson.Value, p, j, i int, base string) string {
	rid := base
	if rt == routeGenerate {
		rid = string(at(v.Get("rid"), p).GetStringBytes())
		if rid == "" {
			return s.newRID(rt)
		}
		i = j
	}
	if i == 0 {
		return rid
	}
	return rid + "-" + strconv.Itoa(i)
}
