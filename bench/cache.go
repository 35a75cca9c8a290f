package bench

import (
	"fmt"

	"github.com/valyala/fastjson"
)

// cacheUse is what one answer says of the prefix cache: how many of its
// prompt's tokens the server found cached. SGLang says it in
// meta_info.cached_tokens and meta_info.prompt_tokens on /generate, and in
// usage.prompt_tokens_details.cached_tokens and usage.prompt_tokens on the
// OpenAI routes (only when started with --enable-cache-report there).
type cacheUse struct {
	cached, prompt int
	reported       bool // the answer carried both counts
	// undetailed is set on an OpenAI answer whose usage lacks its
	// prompt_tokens_details: SGLang with --enable-cache-report leaves them
	// null when nothing was cached, so such an answer counts as 0 cached,
	// unless no answer of the run had them (no report at all).
	undetailed bool
}

// cacheUse reads what an answer, or a stream event, says of the prefix
// cache; reported is false when it does not carry both counts.
func (wl *workload) cacheUse(v *fastjson.Value) cacheUse {
	var cached, prompt *fastjson.Value
	if wl.route == RouteGenerate {
		meta := v.Get("meta_info")
		if meta == nil {
			return cacheUse{}
		}
		cached, prompt = meta.Get("cached_tokens"), meta.Get("prompt_tokens")
	} else {
		usage := v.Get("usage")
		if usage == nil {
			return cacheUse{}
		}
		prompt = usage.Get("prompt_tokens")
		if details := usage.Get("prompt_tokens_details"); details != nil && details.Type() == fastjson.TypeObject {
			cached = details.Get("cached_tokens")
		} else if p, ok := tokenCount(prompt); ok {
			return cacheUse{prompt: p, reported: true, undetailed: true} // nothing cached, or no report
		}
	}
	c, okC := tokenCount(cached)
	p, okP := tokenCount(prompt)
	if !okC || !okP {
		return cacheUse{}
	}
	return cacheUse{cached: c, prompt: p, reported: true}
}

// tokenCount reads a token count: a non-negative integer, within what a
// prompt can hold, so that a server's nonsense cannot overflow the sums.
func tokenCount(v *fastjson.Value) (int, bool) {
	if v == nil {
		return 0, false
	}
	n, err := v.Int()
	if err != nil || n < 0 || n > maxPromptTokens {
		return 0, false
	}
	return n, true
}

// maxPromptTokens bounds the token count an answer may report.
const maxPromptTokens = 1 << 40

// cacheTally sums the cache use of successful answers.
type cacheTally struct {
	cached, prompt int64
	reports        int // answers that reported it
	// undetailed counts the reports without prompt_tokens_details (see
	// cacheUse): when every report lacks them, there is no report.
	undetailed int
}

// add counts one answer's cache use, if it reported one.
func (t *cacheTally) add(c cacheUse) {
	if !c.reported {
		return
	}
	t.cached += int64(c.cached)
	t.prompt += int64(c.prompt)
	t.reports++
	if c.undetailed {
		t.undetailed++
	}
}

// merge adds u's sums to t's.
func (t *cacheTally) merge(u cacheTally) {
	t.cached += u.cached
	t.prompt += u.prompt
	t.reports += u.reports
	t.undetailed += u.undetailed
}

// setCache sets r's cache figures from the successful answers' tally.
func (r *Report) setCache(t cacheTally) {
	if t.undetailed == t.reports {
		t = cacheTally{} // an OpenAI route without --enable-cache-report
	}
	r.CacheReports, r.CachedTokens, r.PromptTokens = t.reports, t.cached, t.prompt
	r.CacheHitRate = 0
	if t.prompt > 0 {
		r.CacheHitRate = float64(t.cached) / float64(t.prompt)
	}
}

// cacheText describes the prefix cache's hits: their rate, what it is
// taken over, and the best the workload allows, if known.
func (r *Report) cacheText() string {
	var text string
	if r.CacheReports == 0 {
		text = "not reported by the answers (SGLang's OpenAI routes report them with --enable-cache-report)"
	} else {
		text = fmt.Sprintf("%.3f of prompt tokens cached (%d of %d, in %s)", r.CacheHitRate,
			r.CachedTokens, r.PromptTokens, plural(r.CacheReports, "answer"))
	}
	if r.BestCacheHitRate > 0 {
		text += fmt.Sprintf("; best possible %.3f", r.BestCacheHitRate)
	}
	return text
}
