package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/valyala/fastjson"
)

// maxPromptLine bounds one line of a prompt file.
const maxPromptLine = 64 << 20

// utf8BOM starts files saved by some Windows editors and Python's
// "utf-8-sig"; JSON parsers reject it (RFC 8259 §8.1 lets them ignore it).
var utf8BOM = []byte("\xef\xbb\xbf")

// Prompt is one request of a prompt file. It is plain data; a run only
// reads it.
type Prompt struct {
	// Text is the prompt of /generate and /v1/completions: the "prompt" of
	// the file, or the text of its "messages" joined with newlines, those
	// without any (null, images only) left out (the bench applies no chat
	// template, which it cannot know).
	Text string
	// Messages is the compact JSON list of chat messages that
	// /v1/chat/completions sends as is; nil when the file gave a "prompt",
	// which is then sent as one user message.
	Messages []byte
	// MaxNewTokens, when positive, is this request's output length, in
	// place of Config.MaxNewTokens.
	MaxNewTokens int
}

// ReadPrompts reads a prompt file: JSON Lines, one object per line, each
// with a "prompt" string or a "messages" list of {"role", "content"}
// objects (content a string, a list of {"type": "text", "text"} parts, or
// null as in assistant turns that only call tools), and optionally a
// positive "max_new_tokens" or "max_tokens" (null meaning none). A UTF-8
// byte-order mark and blank lines are skipped. An error names the first bad
// line, counting from 1.
func ReadPrompts(r io.Reader) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxPromptLine)
	var (
		p       fastjson.Parser
		prompts []Prompt
		n       int
	)
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		pr, err := parsePrompt(&p, line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		prompts = append(prompts, pr)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n+1, maxPromptLine)
		}
		return nil, fmt.Errorf("after line %d: %w", n, err)
	}
	if len(prompts) == 0 {
		return nil, errors.New("no prompts")
	}
	return prompts, nil
}

// parsePrompt reads one line of a prompt file.
func parsePrompt(p *fastjson.Parser, line []byte) (Prompt, error) {
	v, err := p.ParseBytes(line)
	if err != nil {
		return Prompt{}, fmt.Errorf("not JSON: %w", err)
	}
	if v.Type() != fastjson.TypeObject {
		return Prompt{}, errors.New("not a JSON object")
	}
	var pr Prompt
	prompt, messages := v.Get("prompt"), v.Get("messages")
	switch {
	case prompt != nil && messages != nil:
		return Prompt{}, errors.New(`has both "prompt" and "messages"`)
	case prompt != nil:
		b, err := prompt.StringBytes()
		if err != nil || len(b) == 0 {
			return Prompt{}, errors.New(`"prompt" is not a non-empty string`)
		}
		pr.Text = string(b)
	case messages != nil:
		if pr.Text, err = messagesText(messages); err != nil {
			return Prompt{}, err
		}
		pr.Messages = messages.MarshalTo(nil)
	default:
		return Prompt{}, errors.New(`want a "prompt" string or a "messages" list`)
	}
	pr.MaxNewTokens, err = promptMaxTokens(v)
	return pr, err
}

// messagesText checks a chat message list and returns its text.
func messagesText(v *fastjson.Value) (string, error) {
	msgs, err := v.Array()
	if err != nil || len(msgs) == 0 {
		return "", errors.New(`"messages" is not a non-empty list`)
	}
	var texts []string
	for i, m := range msgs {
		if role := m.Get("role"); role == nil || role.Type() != fastjson.TypeString {
			return "", fmt.Errorf(`message %d has no "role" string`, i+1)
		}
		text, ok := contentText(m.Get("content"))
		if !ok {
			return "", fmt.Errorf(`message %d has no "content" string or list of text parts`, i+1)
		}
		// A tool call's null content, or an image alone, is no text: it
		// would leave a stray newline in the prompt.
		if text != "" {
			texts = append(texts, text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// contentText returns the text of a message's content: a string, or the
// non-empty text parts of a list, joined with newlines; other parts are
// skipped. Null is no text: OpenAI's assistant turns that call tools have
// it.
func contentText(v *fastjson.Value) (string, bool) {
	switch {
	case v == nil:
		return "", false
	case v.Type() == fastjson.TypeNull:
		return "", true
	}
	if s, err := v.StringBytes(); err == nil {
		return string(s), true
	}
	parts, err := v.Array()
	if err != nil {
		return "", false
	}
	var texts []string
	for _, p := range parts {
		if t := p.GetStringBytes("text"); string(p.GetStringBytes("type")) == "text" && len(t) > 0 {
			texts = append(texts, string(t))
		}
	}
	return strings.Join(texts, "\n"), true
}

// promptMaxTokens reads a line's output length: 0 when it has none, or
// null, as datasets exported with every field have.
func promptMaxTokens(v *fastjson.Value) (int, error) {
	get := func(key string) *fastjson.Value {
		if m := v.Get(key); m != nil && m.Type() != fastjson.TypeNull {
			return m
		}
		return nil
	}
	name, m := "max_new_tokens", get("max_new_tokens")
	if t := get("max_tokens"); t != nil {
		if m != nil {
			return 0, errors.New(`has both "max_new_tokens" and "max_tokens"`)
		}
		name, m = "max_tokens", t
	}
	if m == nil {
		return 0, nil
	}
	n, err := m.Int()
	if err != nil || n < 1 || n > maxDraw {
		return 0, fmt.Errorf("%q is not an integer from 1 to %d", name, maxDraw)
	}
	return n, nil
}
