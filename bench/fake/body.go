package fake

import (
	"strconv"
	"time"
)

// Answer and stream-event bodies, in SGLang's shapes, written by appending.
// Token t has id t and text " tok<t>"; prompt token j has the id the body
// gave in input_ids, else j.

// finishKind says how an item's generation ended.
type finishKind uint8

const (
	finishNone   finishKind = iota // unfinished: a stream chunk before the last
	finishLength                   // max tokens reached
	finishAbort                    // aborted or failed
)

// finish is an item's finish_reason.
type finish struct {
	kind   finishKind
	msg    string
	status int // the abort's status_code; 0 writes null
}

// appendGenerate appends the /generate meta_info.finish_reason after k
// tokens.
func (f finish) appendGenerate(dst []byte, k int) []byte {
	switch f.kind {
	case finishLength:
		dst = append(dst, `{"type":"length","length":`...)
		dst = strconv.AppendInt(dst, int64(k), 10)
		return append(dst, '}')
	case finishAbort:
		dst = append(dst, `{"type":"abort","message":`...)
		dst = appendString(dst, f.msg)
		dst = append(dst, `,"status_code":`...)
		if f.status == 0 {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendInt(dst, int64(f.status), 10)
		}
		return append(dst, `,"err_type":null}`...)
	}
	return append(dst, "null"...)
}

// appendOpenAI appends an OpenAI choice's finish_reason.
func (f finish) appendOpenAI(dst []byte) []byte {
	switch f.kind {
	case finishLength:
		return append(dst, `"length"`...)
	case finishAbort:
		return append(dst, `"abort"`...)
	}
	return append(dst, "null"...)
}

// answerTokens is how many tokens an answer ending with fin reports for it.
func (s *Server) answerTokens(it *item, fin finish) int {
	if fin.kind == finishAbort {
		return 0
	}
	return s.tokensOf(it)
}

// appendAnswer appends the non-stream answer of r; f, if not nil, is an
// abort that ended every item.
func (s *Server) appendAnswer(dst []byte, r *request, f *failure) []byte {
	fin := finish{kind: finishLength}
	if f != nil {
		fin = finish{kind: finishAbort, msg: f.msg}
	}
	if r.route != routeGenerate {
		return s.appendCompletion(dst, r, fin)
	}
	if !r.list {
		it := &r.items[0]
		return s.appendGenerateItem(dst, r, it, s.answerTokens(it, fin), fin)
	}
	dst = append(dst, '[')
	for i := range r.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		it := &r.items[i]
		dst = s.appendGenerateItem(dst, r, it, s.answerTokens(it, fin), fin)
	}
	return append(dst, ']')
}

// appendGenerateItem appends the /generate object of item it after k
// tokens: the whole answer of a single item, or one element or stream chunk
// of a batch. A batch's stream chunks carry "index"; its non-stream list
// does not, as SGLang adds it in the stream branch of
// _handle_batch_request only.
func (s *Server) appendGenerateItem(dst []byte, r *request, it *item, k int, fin finish) []byte {
	dst = append(dst, `{"text":`...)
	dst = appendTokenText(dst, 0, k)
	dst = append(dst, `,"output_ids":[`...)
	for t := range k {
		if t > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(t), 10)
	}
	dst = append(dst, `],"meta_info":{"id":`...)
	dst = appendString(dst, it.rid)
	dst = append(dst, `,"finish_reason":`...)
	dst = fin.appendGenerate(dst, k)
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(it.promptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(k), 10)
	dst = append(dst, `,"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(it.cached), 10)
	dst = append(dst, `,"weight_version":"default","dp_rank":`...)
	dst = strconv.AppendInt(dst, int64(it.dpRank), 10)
	dst = append(dst, `,"e2e_latency":`...)
	dst = appendFloat(dst, time.Since(r.start).Seconds())
	if r.stream {
		dst = appendSent(dst)
	}
	if it.logprob {
		dst = s.appendLogprobs(dst, it, k)
	}
	dst = append(dst, '}')
	if r.list && r.stream {
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, int64(it.index), 10)
	}
	return append(dst, '}')
}

// appendLogprobs appends meta_info's input_token_logprobs and
// output_token_logprobs, entries [logprob, token_id, null]. A decode reports
// only the last prompt position, as in SGLang PD the decode's list covers
// only what it computed; so the merge of both legs' lists is visible. An
// item the decode prefilled itself has the whole prompt's list, as on an
// aggregated server: there is nothing to merge.
func (s *Server) appendLogprobs(dst []byte, it *item, k int) []byte {
	from, to := 0, it.promptTokens
	if s.cfg.Role == RoleDecode && !it.local {
		from = max(to-1, 0)
	}
	dst = append(dst, `,"input_token_logprobs":[`...)
	for j := from; j < to; j++ {
		if j > from {
			dst = append(dst, ',')
		}
		id := j
		if j < len(it.inputIDs) {
			id = it.inputIDs[j]
		}
		dst = appendLogprob(dst, j, id, j > 0) // the first prompt token has none
	}
	dst = append(dst, `],"output_token_logprobs":[`...)
	for t := range k {
		if t > 0 {
			dst = append(dst, ',')
		}
		dst = appendLogprob(dst, t, t, true)
	}
	return append(dst, ']')
}

// appendLogprob appends [logprob, id, null] for position pos; the logprob
// is null when has is false.
func appendLogprob(dst []byte, pos, id int, has bool) []byte {
	dst = append(dst, '[')
	if has {
		dst = appendFloat(dst, -float64(pos%10+1)/10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(id), 10)
	return append(dst, ",null]"...)
}

// appendTokenText appends the text of tokens [from, to) as a JSON string.
func appendTokenText(dst []byte, from, to int) []byte {
	dst = append(dst, '"')
	for t := from; t < to; t++ {
		dst = append(dst, " tok"...)
		dst = strconv.AppendInt(dst, int64(t), 10)
	}
	return append(dst, '"')
}

// appendCompletion appends a chat.completion or text_completion answer.
func (s *Server) appendCompletion(dst []byte, r *request, fin finish) []byte {
	dst = s.appendObjectHead(dst, r, false)
	for i := range r.items {
		it := &r.items[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(it.index), 10)
		if r.route == routeChat {
			dst = append(dst, `,"message":{"role":"assistant","content":`...)
			dst = appendTokenText(dst, 0, s.answerTokens(it, fin))
			dst = append(dst, `,"reasoning_content":null,"tool_calls":null}`...)
		} else {
			dst = append(dst, `,"text":`...)
			dst = appendTokenText(dst, 0, s.answerTokens(it, fin))
		}
		dst = appendChoiceTail(dst, fin)
	}
	dst = append(dst, `],"usage":`...)
	dst = s.appendUsage(dst, r, fin)
	return append(dst, '}')
}

// appendObjectHead appends an OpenAI answer or chunk up to its choices list.
func (s *Server) appendObjectHead(dst []byte, r *request, chunk bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.rid)
	switch {
	case r.route == routeChat && chunk:
		dst = append(dst, `,"object":"chat.completion.chunk"`...)
	case r.route == routeChat:
		dst = append(dst, `,"object":"chat.completion"`...)
	default:
		dst = append(dst, `,"object":"text_completion"`...)
	}
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, r.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, r.model)
	if chunk {
		dst = appendSent(dst)
	}
	return append(dst, `,"choices":[`...)
}

// appendSent appends the sent_unix_nano member that stamps a stream event
// with the wall-clock time it was built, just before it is written, so a
// load generator on the same machine can measure how late each event
// reaches it (the bench's event lag). It is a fake-only field: SGLang sends
// no such thing.
func appendSent(dst []byte) []byte {
	dst = append(dst, `,"sent_unix_nano":`...)
	return strconv.AppendInt(dst, time.Now().UnixNano(), 10)
}

// appendChoiceTail closes an OpenAI choice.
func appendChoiceTail(dst []byte, fin finish) []byte {
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = fin.appendOpenAI(dst)
	return append(dst, `,"matched_stop":null}`...)
}

// appendUsage appends the usage object: each prompt counts once, however
// many samples it has, and so do its cached tokens, reported only with
// Config.CacheReport and when above 0, as SGLang's UsageProcessor does.
func (s *Server) appendUsage(dst []byte, r *request, fin finish) []byte {
	prompt, completion, cached := 0, 0, 0
	for i := range r.items {
		it := &r.items[i]
		if it.first {
			prompt += it.promptTokens
			cached += it.cached
		}
		completion += s.answerTokens(it, fin)
	}
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	if !s.cfg.CacheReport || cached == 0 {
		return append(dst, `,"prompt_tokens_details":null}`...)
	}
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	return append(dst, "}}"...)
}

// appendChunk appends one OpenAI stream chunk for item it: the role delta
// when role is set, else token t's delta (t < 0: an empty delta) with fin.
func (s *Server) appendChunk(dst []byte, r *request, it *item, role bool, t int, fin finish) []byte {
	dst = s.appendObjectHead(dst, r, true)
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(it.index), 10)
	switch {
	case r.route == routeChat && role:
		dst = append(dst, `,"delta":{"role":"assistant","content":""}`...)
	case r.route == routeChat && t < 0:
		dst = append(dst, `,"delta":{}`...)
	case r.route == routeChat:
		dst = append(dst, `,"delta":{"content":`...)
		dst = appendTokenText(dst, t, t+1)
		dst = append(dst, '}')
	case t < 0:
		dst = append(dst, `,"text":""`...)
	default:
		dst = append(dst, `,"text":`...)
		dst = appendTokenText(dst, t, t+1)
	}
	dst = appendChoiceTail(dst, fin)
	return append(dst, `],"usage":null}`...)
}

// appendUsageChunk appends the last chunk of a stream that asked for
// stream_options.include_usage.
func (s *Server) appendUsageChunk(dst []byte, r *request, fin finish) []byte {
	dst = s.appendObjectHead(dst, r, true)
	dst = append(dst, `],"usage":`...)
	dst = s.appendUsage(dst, r, fin)
	return append(dst, '}')
}
