package hostile

import (
	"net/http"
	"time"

	"pdlb/bench/fake"
)

// Issue 19, item 7: the client's own bootstrap fields.

// escapedKeysBody carries bootstrap fields spelled with an escape, as
// json.loads reads them: "bootstrap\u005fhost" is bootstrap_host. The host
// is the attacker's, with the canary in it.
const escapedKeysBody = `{"text":"hi","sampling_params":{"max_new_tokens":4},` +
	`"bootstrap\u005fhost":"` + canary + `.invalid","bootstrap\u005fport":1,"bootstrap\u005froom":12345}`

func escapedBootstrapKeysEnv(form) envConfig {
	return envConfig{flags: []serveFlag{{"--decode-local-prefill", ""}}}
}

// escapedBootstrapKeys (item 7) sends, every 100 ms over form.hold,
// /generate requests carrying bootstrap fields spelled with escapes, in
// turn decode-only (X-PD-Mode: decode-only, which with
// --decode-local-prefill goes to a decode that prefills it itself) and on
// the PD path. pdlb must remove the client's fields in every spelling, so
// each request is served and no worker sees the canary of the client's
// bootstrap_host; the decode is never ejected (the harness checks).
func escapedBootstrapKeys(a *arena) {
	i, failed := 0, 0
	a.repeat(100*time.Millisecond, func() {
		var headers []string
		if i++; i%2 == 0 {
			headers = []string{"X-PD-Mode: decode-only"}
		}
		status, body, err := exchange(a.env.addr, request("/generate", headers, escapedKeysBody), loadTimeout)
		if (err != nil || status != http.StatusOK) && failed < 3 {
			failed++
			a.Errorf("a request with escaped bootstrap keys %v: got %d %.200s (%v); want 200", headers, status, body, err)
		}
	})
	if n := a.env.sumStats(func(s fake.Stats) uint64 { return s.Canaries }); n > 0 {
		a.Errorf("%d requests reached the workers with the client's bootstrap_host", n)
	}
}
