package bootstrap

// The routing policies that follow the workers' prefix caches (cache_aware,
// prefix_hash) key a request on its prompt: the bytes a worker's cache
// would hold first. RoutingKey is where those are in the body, found
// without decoding it:
//   - a text prompt ("text", or an OpenAI "prompt" string): the string's
//     content, escapes as the client wrote them;
//   - token ids ("input_ids", or a "prompt" of ids): the list as written;
//   - a chat: the whole "messages" list as written, every message in
//     order, so that conversations that share their first turns share a
//     prefix (keying on the first message alone is SGLang issue #26263);
//   - a batch (a list of prompts): its first item, by which the whole batch
//     is routed.
//
// Raw bytes, not decoded text, are what the keys compare: a client writes
// the same prompt the same way each time, and a prefix of the raw bytes is
// a prefix of the decoded prompt.

// promptMember is the raw value of a prompt member and where it starts in
// the body; value is nil when the member is absent.
type promptMember struct {
	value []byte
	at    int
}

// routingKey returns the span of the routing key among the prompt members
// given in the order Parse prefers them: the first present and not null
// holds it. It is empty when none does, or the prompt is an empty list.
func routingKey(members ...promptMember) Span {
	for _, m := range members {
		if m.value == nil || string(m.value) == "null" {
			continue
		}
		return keyOf(m.value, m.at)
	}
	return Span{}
}

// keyOf returns the span of the routing key in v, a prompt member's raw
// value starting at offset at of the body.
func keyOf(v []byte, at int) Span {
	switch v[0] {
	case '"':
		return Span{Start: at + 1, Len: len(v) - 2}
	case '[':
	default:
		return Span{}
	}
	i := skipSpace(v, 1)
	if i == len(v) {
		return Span{}
	}
	switch v[i] {
	case '"', '[': // a batch of prompts: its first
		end, err := skipValue(v, i, maxDepth)
		if err != nil {
			return Span{}
		}
		return keyOf(v[i:end], at+i)
	case ']':
		return Span{}
	}
	return Span{Start: at, Len: len(v)} // token ids, or chat messages
}
