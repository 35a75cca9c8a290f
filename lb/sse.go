package lb

import (
	"bytes"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// A worker's stream is server-sent events: "data: <JSON>" lines, each event
// ended by a blank line, and "data: [DONE]" last. These read it; the relay
// (relay.go), the prefill-end classification (prefillend.go) and the first
// event's check (stream.go) share them.

// isEventStream reports whether contentType is that of server-sent events.
func isEventStream(contentType []byte) bool {
	return bytes.HasPrefix(contentType, []byte("text/event-stream"))
}

// cutEvent splits the first event off a stream read whole: through its
// blank line, or all of it when no blank line ends it (a stream's last
// event may lack one).
func cutEvent(stream []byte) (ev, rest []byte) {
	n := eventEnd(stream)
	if n == 0 {
		n = len(stream)
	}
	return stream[:n], stream[n:]
}

// eventEnd returns the length of the first event in b including the blank
// line that ends it ("\n\n" or "\r\n\r\n"), or 0 if b holds no whole event.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		k := i + j + 1
		if k < len(b) && b[k] == '\n' {
			return k + 1
		}
		if k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n' {
			return k + 2
		}
		i = k
	}
	return 0
}

// eventData returns the payload of a "data:" event and its offset in ev.
func eventData(ev []byte) (data []byte, off int, ok bool) {
	rest, ok := bytes.CutPrefix(ev, []byte("data:"))
	if !ok {
		return nil, 0, false
	}
	trimmed := bytes.TrimLeft(rest, " ")
	off = len(ev) - len(trimmed)
	return bytes.TrimSpace(trimmed), off, true
}

var doneData = []byte("[DONE]")

// wholeEvent reports whether ev, the end of a stream that lacks the blank
// line ending it, is an event whole: its data [DONE] or JSON that parses,
// or no data line at all (a comment). A body that ends in the middle of an
// event's JSON leaves only a piece of it.
func wholeEvent(ev []byte) bool {
	data, _, ok := eventData(ev)
	return !ok || bytes.Equal(data, doneData) || gjson.ValidBytes(data)
}

// isFailureEvent reports whether the SSE event ev is a failure a worker
// streamed instead of tokens: an {"error": ...} object, a finish_reason of
// type "abort" with a 5xx status_code, or the refusal of a request without a
// room.
func isFailureEvent(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"error"`)) && !bytes.Contains(ev, []byte(`"abort"`)) {
		return false
	}
	data, _, ok := eventData(ev)
	if !ok {
		return false
	}
	if bytes.Contains(data, noRoomMarker) || gjson.GetBytes(data, "error.code").Int() >= fasthttp.StatusInternalServerError {
		return true
	}
	fr := gjson.GetBytes(data, "meta_info.finish_reason")
	return fr.Get("type").String() == "abort" && fr.Get("status_code").Int() >= fasthttp.StatusInternalServerError
}
