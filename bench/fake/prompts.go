package fake

import "github.com/valyala/fastjson"

// Reading a request's prompts: their token counts and, for the prefix
// cache, their block hashes (tokens.go).

// prompt is one prompt of a request before it is expanded into items.
type prompt struct {
	tokens int
	ids    *fastjson.Value // the input_ids array, nil for text
	blocks []uint64        // chained block hashes, nil when the server does not cache
}

// hashPageSize is the page size prompts are hashed with for the prefix
// cache, 0 when the server keeps none: a decode, or no Config.CacheTokens.
func (s *Server) hashPageSize() int {
	if s.cfg.CacheTokens <= 0 || s.cfg.Role == RoleDecode {
		return 0
	}
	return s.cfg.PageSize
}

// promptsOf returns the prompts of a request and whether /generate got a
// batch (a list of texts or a list of input_ids lists). With page > 0, each
// prompt's block hashes are computed for the prefix cache.
func promptsOf(rt route, v *fastjson.Value, page int) ([]prompt, bool, error) {
	switch rt {
	case routeGenerate:
		if t := v.Get("text"); t != nil && t.Type() != fastjson.TypeNull {
			return textPrompts(t, "text", page)
		}
		if ids := v.Get("input_ids"); ids != nil && ids.Type() != fastjson.TypeNull {
			return idPrompts(ids, "input_ids", page)
		}
		return nil, false, badRequest("Either text, input_ids or input_embeds should be provided.")
	case routeCompletions:
		pv := v.Get("prompt")
		if pv == nil || pv.Type() == fastjson.TypeNull {
			return nil, false, badRequest("prompt: Field required")
		}
		if a := pv.GetArray(); len(a) > 0 && a[0].Type() != fastjson.TypeString {
			return idPrompts(pv, "prompt", page)
		}
		return textPrompts(pv, "prompt", page)
	default:
		m := v.Get("messages")
		n, err := messageBytes(m)
		if err != nil {
			return nil, false, err
		}
		p := prompt{tokens: estimateTokens(n)}
		if page > 0 {
			p.blocks = chatBlocks(m, page)
		}
		return []prompt{p}, false, nil
	}
}

// textPrompt is the prompt of text b.
func textPrompt(b []byte, page int) prompt {
	p := prompt{tokens: estimateTokens(len(b))}
	if page > 0 {
		p.blocks = textBlocks(b, page)
	}
	return p
}

// textPrompts reads a string or a list of strings.
func textPrompts(t *fastjson.Value, field string, page int) ([]prompt, bool, error) {
	if t.Type() == fastjson.TypeString {
		return []prompt{textPrompt(t.GetStringBytes(), page)}, false, nil
	}
	a, err := t.Array()
	if err != nil || len(a) == 0 {
		return nil, false, badRequest(field + " must be a string or a non-empty list of strings")
	}
	ps := make([]prompt, len(a))
	for i, e := range a {
		b, err := e.StringBytes()
		if err != nil {
			return nil, false, badRequest(field + " must be a string or a non-empty list of strings")
		}
		ps[i] = textPrompt(b, page)
	}
	return ps, true, nil
}

// idPrompts reads a list of token ids or a list of such lists.
func idPrompts(ids *fastjson.Value, field string, page int) ([]prompt, bool, error) {
	a, err := ids.Array()
	if err != nil {
		return nil, false, badRequest(field + " must be a list of token ids or a list of such lists")
	}
	if len(a) == 0 || a[0].Type() != fastjson.TypeArray {
		return []prompt{idPrompt(ids, page)}, false, nil
	}
	ps := make([]prompt, len(a))
	for i, e := range a {
		if e.Type() != fastjson.TypeArray {
			return nil, false, badRequest(field + " must be a list of token ids or a list of such lists")
		}
		ps[i] = idPrompt(e, page)
	}
	return ps, true, nil
}

// idPrompt is the prompt of the token id list ids.
func idPrompt(ids *fastjson.Value, page int) prompt {
	p := prompt{tokens: len(ids.GetArray()), ids: ids}
	if page > 0 {
		p.blocks = idBlocks(ids, page)
	}
	return p
}

// messageBytes sums the text bytes of chat messages (eachMessageText).
func messageBytes(m *fastjson.Value) (int, error) {
	if m == nil || m.Type() != fastjson.TypeArray {
		return 0, badRequest("messages: Field required")
	}
	n := 0
	eachMessageText(m, func(b []byte) { n += len(b) })
	return n, nil
}

// eachMessageText calls f with each piece of text of the messages m, in
// order: a message's content is a string or a list of parts with "text".
// This is the conversation the fakes count and cache; the roles and the
// template that would join them add the same few tokens to every
// conversation of the same shape, and are left out.
func eachMessageText(m *fastjson.Value, f func([]byte)) {
	for _, msg := range m.GetArray() {
		c := msg.Get("content")
		if c == nil {
			continue
		}
		if c.Type() == fastjson.TypeString {
			f(c.GetStringBytes())
			continue
		}
		for _, part := range c.GetArray() {
			f(part.GetStringBytes("text"))
		}
	}
}

// estimateTokens is the token count of a text of n bytes: ceil(n/4), at
// least 1.
func estimateTokens(n int) int {
	if n <= 0 {
		return 1
	}
	return (n + 3) / 4
}
