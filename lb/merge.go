package lb

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
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
