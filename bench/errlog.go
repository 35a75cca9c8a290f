package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// A count by kind says a target answered 404 fourteen thousand times, not
// why; the first distinct messages do ("Not Found", SGLang's "without
// bootstrap room id"), within bounds that keep a failing run's report and
// memory small (issue 20).
const (
	// maxErrorMessages is how many distinct messages a Report keeps.
	maxErrorMessages = 5
	// maxMessageLen bounds a message, in bytes.
	maxMessageLen = 200
	// maxErrorBody bounds what is read of a streamed error answer for its
	// message.
	maxErrorBody = 4 << 10
)

// ErrorMessage is one distinct way measured requests failed.
type ErrorMessage struct {
	// Kind is the failure's key in Report.Errors.
	Kind string `json:"kind"`
	// Message is what the answer, stream event or error said, on one line
	// and at most 200 bytes (cut ones end in "..."); empty when it said
	// nothing (an error status with no body).
	Message string `json:"message"`
	// Count is the number of measured requests that failed so.
	Count int `json:"count"`
}

// errorLog keeps the first maxErrorMessages distinct failures, with their
// counts: of a runner's measured requests, or of a streak. It is safe for
// concurrent use, and only failed requests touch it.
type errorLog struct {
	mu       sync.Mutex
	messages []ErrorMessage
}

// add counts a failure of kind with message msg.
func (l *errorLog) add(kind string, msg []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.messages {
		if m := &l.messages[i]; m.Kind == kind && m.Message == string(msg) {
			m.Count++
			return
		}
	}
	if len(l.messages) < maxErrorMessages {
		l.messages = append(l.messages, ErrorMessage{Kind: kind, Message: string(msg), Count: 1})
	}
}

// snapshot returns a copy of the messages so far, never nil.
func (l *errorLog) snapshot() []ErrorMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(make([]ErrorMessage, 0, len(l.messages)), l.messages...)
}

// appendMessages appends messages to dst for people, one line each (kind,
// count and message): the first after label, the others after as much
// space.
func appendMessages(dst []byte, label string, messages []ErrorMessage) []byte {
	for i, m := range messages {
		if i == 1 {
			label = strings.Repeat(" ", len(label))
		}
		text := m.Message
		if text == "" {
			text = "(no message)"
		}
		dst = fmt.Appendf(dst, "%s%s %s: %s\n", label, m.Kind, plural(m.Count, "time"), text)
	}
	return dst
}

// restore brings the messages back to a snapshot.
func (l *errorLog) restore(messages []ErrorMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.messages = slices.Clone(messages)
}

// appendAnswerMessage appends to dst what a failed answer, or stream
// event, says: the message of an {"error": {"message": ...}} or {"error":
// "..."} (OpenAI, SGLang, pdlb), of FastAPI's {"detail": ...}, of a
// {"message": ...}, or of an abort's meta_info.finish_reason; else the
// body itself, after "not JSON: " when it is not. It is cut as
// appendOneLine does.
func appendAnswerMessage(dst []byte, p *fastjson.Parser, body []byte) []byte {
	v, err := p.ParseBytes(body)
	if err != nil {
		if len(body) > 0 {
			dst = append(dst, "not JSON: "...)
		}
		return appendOneLine(dst, body)
	}
	return appendValueMessage(dst, v, body)
}

// appendValueMessage is appendAnswerMessage for a body already parsed
// into v.
func appendValueMessage(dst []byte, v *fastjson.Value, body []byte) []byte {
	if items, err := v.Array(); err == nil {
		// A batch: the first item that says something.
		for _, it := range items {
			if m := answerMessage(it); m != nil {
				return appendOneLine(dst, m)
			}
		}
	} else if m := answerMessage(v); m != nil {
		return appendOneLine(dst, m)
	}
	return appendOneLine(dst, body)
}

// answerMessage returns the message in a JSON answer, or nil.
func answerMessage(v *fastjson.Value) []byte {
	for _, path := range [][]string{
		{"error", "message"}, {"error"}, {"detail"}, {"message"}, {"meta_info", "finish_reason", "message"},
	} {
		m := v.Get(path...)
		switch {
		case m == nil || m.Type() == fastjson.TypeNull:
		case m.Type() == fastjson.TypeString:
			return m.GetStringBytes()
		case len(path) == 1:
			return m.MarshalTo(nil) // an object without a message, a list
		}
	}
	return nil
}

// appendStreamError appends what ended a stream before its end.
func appendStreamError(dst []byte, err error) []byte {
	if errors.Is(err, io.EOF) {
		return append(dst, "the stream ended before data: [DONE]"...)
	}
	return appendErrorMessage(dst, err)
}

// appendOneLine appends s to dst on one line, runs of white space made one
// space, cut to maxMessageLen bytes at a character's boundary with "..."
// at the end.
func appendOneLine(dst, s []byte) []byte {
	if len(s) > 4*maxMessageLen {
		// Enough for the message even if much of it is white space.
		end := 4 * maxMessageLen
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		s = s[:end]
	}
	start := len(dst)
	for f := range strings.FieldsSeq(string(s)) {
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, f...)
		if len(dst)-start > maxMessageLen {
			break
		}
	}
	if len(dst)-start <= maxMessageLen {
		return dst
	}
	end := start + maxMessageLen - len("...")
	for end > start && !utf8.RuneStart(dst[end]) {
		end--
	}
	return append(dst[:end], "..."...)
}

// appendErrorMessage appends what a transport error says, without the
// local address of a connection (an ephemeral port would make every
// failure distinct).
func appendErrorMessage(dst []byte, err error) []byte {
	text := err.Error()
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Source != nil {
		bare := *oe
		bare.Source = nil
		text = strings.Replace(text, oe.Error(), bare.Error(), 1)
	}
	return appendOneLine(dst, []byte(text))
}
