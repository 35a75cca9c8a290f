package lb

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// The prefill computes what the decode never sees: the logprobs of the prompt
// tokens, and the routed experts of the prompt. mini_lb merges them into the
// decode's answer (sglang_router's mini_lb.py, _merge_prefill_json and
// generate_stream); pdlb does the same by splicing the decode's bytes, so
// everything else stays as the decode wrote it. A field that is missing or
// malformed on either side leaves the answer unchanged: a merge must never
// turn an answer into an error.

// splice replaces body[start:end] with with.
type splice struct {
	start, end int
	with       []byte
}

// mergeAnswers appends to dst the decode's non-stream answer with the
// prefill's input_token_logprobs prepended to its own and the prefill's
// routed experts joined to the decode's, in meta_info (/generate) or sglext
// (OpenAI routes). A /generate batch's answer, a list, is merged item by
// item, as its stream's events are (mini_lb merges no list).
func mergeAnswers(dst, prefill, decode []byte) []byte {
	var edits []splice
	if bytes.HasPrefix(bytes.TrimSpace(decode), []byte("[")) {
		n := min(gjson.GetBytes(prefill, "#").Int(), gjson.GetBytes(decode, "#").Int())
		for i := range n {
			edits = appendMergeEdits(edits, prefill, decode, strconv.FormatInt(i, 10)+".")
		}
	} else {
		edits = appendMergeEdits(edits, prefill, decode, "")
	}
	return applySplices(dst, decode, edits)
}

// appendMergeEdits appends the edits that merge the answer at path prefix
// in prefill and decode ("" for the whole of each, "i." for a batch's item
// i).
func appendMergeEdits(edits []splice, prefill, decode []byte, prefix string) []splice {
	if gjson.GetBytes(prefill, prefix+"meta_info").IsObject() && gjson.GetBytes(decode, prefix+"meta_info").IsObject() {
		edits = appendLogprobsEdit(edits, prefill, decode, prefix+"meta_info.input_token_logprobs")
		edits = appendExpertsEdit(edits, prefill, decode, prefix+"meta_info.routed_experts")
	}
	if gjson.GetBytes(prefill, prefix+"sglext").IsObject() && gjson.GetBytes(decode, prefix+"sglext").IsObject() {
		edits = appendExpertsEdit(edits, prefill, decode, prefix+"sglext.routed_experts")
	}
	return edits
}

func appendLogprobsEdit(edits []splice, prefill, decode []byte, path string) []splice {
	p, d := gjson.GetBytes(prefill, path), gjson.GetBytes(decode, path)
	if !p.IsArray() || !d.IsArray() || !locatable(decode, d) {
		return edits
	}
	return append(edits, splice{d.Index, d.Index + len(d.Raw), appendConcatArrays(nil, []byte(p.Raw), []byte(d.Raw))})
}

func appendExpertsEdit(edits []splice, prefill, decode []byte, path string) []splice {
	p, d := gjson.GetBytes(prefill, path), gjson.GetBytes(decode, path)
	if p.Type != gjson.String || d.Type != gjson.String || !locatable(decode, d) {
		return edits
	}
	joined, ok := joinExperts(p.Str, d.Str)
	if !ok {
		return edits
	}
	with := append(append([]byte{'"'}, joined...), '"')
	return append(edits, splice{d.Index, d.Index + len(d.Raw), with})
}

// joinExperts returns base64(prefill + decode[len(prefill):]) of two base64
// strings, as mini_lb's _merge_routed_experts does.
func joinExperts(prefill, decode string) (string, bool) {
	p, err := base64.StdEncoding.DecodeString(prefill)
	if err != nil {
		return "", false
	}
	d, err := base64.StdEncoding.DecodeString(decode)
	if err != nil {
		return "", false
	}
	if len(d) > len(p) {
		p = append(p, d[len(p):]...)
	}
	return base64.StdEncoding.EncodeToString(p), true
}

// locatable reports whether r's position in body is known, so it can be
// spliced.
func locatable(body []byte, r gjson.Result) bool {
	end := r.Index + len(r.Raw)
	return r.Index > 0 && end <= len(body) && string(body[r.Index:end]) == r.Raw
}

// appendConcatArrays appends the JSON list holding a's items then b's.
func appendConcatArrays(dst, a, b []byte) []byte {
	ia, ib := arrayItems(a), arrayItems(b)
	dst = append(dst, '[')
	dst = append(dst, ia...)
	if len(ia) > 0 && len(ib) > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, ib...)
	return append(dst, ']')
}

// arrayItems returns the text between a JSON list's brackets, trimmed.
func arrayItems(list []byte) []byte {
	list = bytes.TrimSpace(list)
	return bytes.TrimSpace(list[1 : len(list)-1])
}

func applySplices(dst, body []byte, edits []splice) []byte {
	slices.SortFunc(edits, func(a, b splice) int { return a.start - b.start })
	at := 0
	for _, e := range edits {
		dst = append(dst, body[at:e.start]...)
		dst = append(dst, e.with...)
		at = e.end
	}
	return append(dst, body[at:]...)
}

// firstEventLogprobs returns the raw meta_info.input_token_logprobs list of
// the first data event of a prefill's stream, or nil.
func firstEventLogprobs(stream []byte) []byte {
	for len(stream) > 0 {
		var ev []byte
		ev, stream = cutEvent(stream)
		if data, _, ok := eventData(ev); ok && !bytes.Equal(data, doneData) {
			lp := gjson.GetBytes(data, "meta_info.input_token_logprobs")
			if !lp.IsArray() {
				return nil
			}
			return []byte(lp.Raw)
		}
	}
	return nil
}

// mergeEventLogprobs appends to dst the event ev, whose JSON payload starts
// at offset off, with prefill's logprobs prepended to its
// meta_info.input_token_logprobs. It reports false when the event has no
// such list.
func mergeEventLogprobs(dst, ev []byte, off int, prefill []byte) ([]byte, bool) {
	d := gjson.GetBytes(ev[off:], "meta_info.input_token_logprobs")
	if !d.IsArray() || !locatable(ev[off:], d) {
		return dst, false
	}
	start := off + d.Index
	dst = append(dst, ev[:start]...)
	dst = appendConcatArrays(dst, prefill, []byte(d.Raw))
	return append(dst, ev[start+len(d.Raw):]...), true
}

// A stream's events are merged one at a time, as the relay passes them on:
// the prefill's logprobs are taken once (usePrefill), then spliced into
// each event (appendMerged).

// usePrefill takes the input_token_logprobs of the prefill's first event,
// or of a batch's, the first event of each item.
func (r *relay) usePrefill(p *call) {
	if p.err != nil || p.resp.StatusCode() != fasthttp.StatusOK {
		return
	}
	if r.items > 0 {
		r.useItemLogprobs(p.resp.Body())
		return
	}
	if lp := firstEventLogprobs(p.resp.Body()); lp != nil {
		r.prefillLogprobs = append(r.prefillLogprobs[:0], lp...)
	}
}

// maxOutputIndex bounds the "index" of a batch's stream events that
// useItemLogprobs takes, so an odd worker cannot make it grow without end.
const maxOutputIndex = 1 << 16

// useItemLogprobs takes, for each output of a batch (an item, or one of an
// item's n samples), the input_token_logprobs of the first event of the
// prefill's stream with its "index". (mini_lb puts the first output's in
// every output's events.)
func (r *relay) useItemLogprobs(stream []byte) {
	for len(stream) > 0 {
		var ev []byte
		ev, stream = cutEvent(stream)
		data, _, ok := eventData(ev)
		if !ok || bytes.Equal(data, doneData) {
			continue
		}
		i := int(gjson.GetBytes(data, "index").Int())
		lp := gjson.GetBytes(data, "meta_info.input_token_logprobs")
		if i < 0 || i >= maxOutputIndex || !lp.IsArray() {
			continue // an index no output has, from an odd worker
		}
		for len(r.itemLogprobs) <= i {
			r.itemLogprobs = append(r.itemLogprobs, [2]int{})
		}
		if r.itemLogprobs[i] == ([2]int{}) {
			start := len(r.prefillLogprobs)
			r.prefillLogprobs = append(r.prefillLogprobs, lp.Raw...)
			r.itemLogprobs[i] = [2]int{start, len(r.prefillLogprobs)}
		}
	}
}

// logprobsFor returns the prefill's logprobs to merge into the event whose
// payload is data.
func (r *relay) logprobsFor(data []byte) []byte {
	if r.items == 0 {
		return r.prefillLogprobs
	}
	i := int(gjson.GetBytes(data, "index").Int())
	if i < 0 || i >= len(r.itemLogprobs) {
		return nil
	}
	span := r.itemLogprobs[i]
	return r.prefillLogprobs[span[0]:span[1]]
}

// appendMerged appends ev with the prefill's input logprobs merged in, or
// as it is when it has none to merge.
func (r *relay) appendMerged(dst, ev []byte) []byte {
	r.noteDone(ev)
	data, off, ok := eventData(ev)
	if !ok || bytes.Equal(data, doneData) {
		return append(dst, ev...)
	}
	lp := r.logprobsFor(data)
	if len(lp) == 0 {
		return append(dst, ev...)
	}
	if merged, ok := mergeEventLogprobs(dst, ev, off, lp); ok {
		return merged
	}
	return append(dst, ev...)
}
