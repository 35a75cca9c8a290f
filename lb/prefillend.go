package lb

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// earlyEnd is how a prefill's 200 answer says its request ended without its
// KV cache being handed over (endedEarly).
type earlyEnd struct {
	item    int    // the batch item it ended, by its index or position
	status  int    // the status it gives, 0 if none
	message string // what it says, "" if nothing
	// aborted is set for an abort (not an error event): one without a
	// status is how a prefill ends what it holds when told to, by
	// /abort_request or by its own shutdown.
	aborted bool
	// failed is set when one of a stream's events, this one or a later, is
	// a failure of the prefill's own (isFailureEvent).
	failed bool
}

// prefillFailed reports whether the early end is the prefill's failure,
// which another prefill may not repeat, rather than the request's (a 4xx
// abort, an error event): a 5xx, a failure event, or an abort without a
// status, as a prefill shutting down ends what it holds (pdlb sends no
// /abort_request of its own but to a call it has given up).
func (e earlyEnd) prefillFailed() bool {
	return e.failed || e.status >= fasthttp.StatusInternalServerError || e.aborted && e.status == 0
}

// endedEarly reports whether a prefill's 200 answer says its request ended
// without its KV cache being handed over, and how: a streamed error or
// abort event of any status, or a JSON answer, or a batch item, that an
// abort finished (an /abort_request, a limit of the prefill's own), in the
// /generate shape or the OpenAI one. The first such end is the one it
// describes; a stream is read to its end for failure events. SGLang
// streams some failures so, and the fake servers answer an aborted request
// so, as SGLang does; left unseen, the decode would wait for a KV cache
// that never comes, up to its own timeout (mini_lb's hang).
func endedEarly(resp *fasthttp.Response) (earlyEnd, bool) {
	body := resp.Body()
	if resp.StatusCode() != fasthttp.StatusOK ||
		!bytes.Contains(body, []byte(`"abort"`)) && !bytes.Contains(body, []byte(`"error"`)) {
		return earlyEnd{}, false // the usual answer, told at the cost of two scans
	}
	if isEventStream(resp.Header.ContentType()) {
		var first earlyEnd
		ended, failed := false, false
		for events := body; len(events) > 0; {
			var ev []byte
			ev, events = cutEvent(events)
			failed = failed || isFailureEvent(ev)
			data, _, ok := eventData(ev)
			if ended || !ok {
				continue
			}
			event := gjson.ParseBytes(data)
			if e := event.Get("error"); e.IsObject() || e.Type == gjson.String {
				first, ended = earlyEnd{item: int(event.Get("index").Int()), status: int(e.Get("code").Int()), message: e.Get("message").String()}, true
			} else {
				first, ended = aborted(event, 0)
			}
		}
		first.failed = failed
		return first, ended || failed
	}
	answer := gjson.ParseBytes(body)
	if answer.IsArray() {
		for i, item := range answer.Array() {
			if end, ok := aborted(item, i); ok {
				return end, true
			}
		}
		return earlyEnd{}, false
	}
	return aborted(answer, 0)
}

// aborted reports whether an answer, or one event of its stream, was
// finished by an abort: a /generate finish_reason of type "abort", or an
// OpenAI choice's finish_reason "abort". item is its position in a list.
func aborted(answer gjson.Result, item int) (earlyEnd, bool) {
	if fr := answer.Get("meta_info.finish_reason"); fr.Get("type").String() == "abort" {
		if i := answer.Get("index"); i.Exists() {
			item = int(i.Int())
		}
		return earlyEnd{item: item, status: int(fr.Get("status_code").Int()), message: fr.Get("message").String(), aborted: true}, true
	}
	if c := answer.Get(`choices.#(finish_reason=="abort")`); c.Exists() {
		return earlyEnd{item: int(c.Get("index").Int()), aborted: true}, true
	}
	return earlyEnd{}, false
}

// errFailureIn200 marks a prefill whose 200 answer holds a failure of its
// own instead of its token (earlyEnd.prefillFailed).
var errFailureIn200 = errors.New("it answered 200 with a failure instead of its token")
