package hostile

import (
	"net/http"
	"time"
)

// Issue 19, item 7: the client's own bootstrap fields.

// escapedKeysBody carries bootstrap fields spelled with an escape, as
// json.loads reads them: "bootstrap\u005fhost" is bootstrap_host. The host
// is the attacker's, with the canary in it.
const escapedKeysBody = `{"text":"hi","sampling_params":{"max_new_tokens":4},` +
	`"bootstrap\u005fhost":"` + canary + `.invalid","bootstrap\u005fport":1,"bootstrap\u005froom":12345}`

// escapedBootstrapKeysEnv sends decode-only /generate traffic to a decode
// that prefills it itself, the path on which pdlb writes no bootstrap field
// of its own after the client's.
func escapedBootstrapKeysEnv(form) envConfig {
	return envConfig{flags: []serveFlag{{"--decode-local-prefill", ""}}}
}

// escapedBootstrapKeys (item 7) sends, every 100 ms over form.hold, two
// /generate requests carrying bootstrap fields spelled with escapes: one
// decode-only (X-PD-Mode: decode-only, which with --decode-local-prefill
// goes to a decode that prefills it itself), one on the PD path. pdlb must
// remove the client's fields in every spelling, so each request is served
// and no worker sees the canary of the client's bootstrap_host; the decode
// is never ejected (the harness checks).
func escapedBootstrapKeys(a *arena) {
	paths := []struct {
		name    string
		headers []string
	}{
		{"decode-only (local prefill)", []string{"X-PD-Mode: decode-only"}},
		{"PD", nil},
	}
	failed, leaked := map[string]bool{}, map[string]uint64{}
	a.repeat(100*time.Millisecond, func() {
		for _, p := range paths {
			before := a.canaries()
			status, body, err := exchange(a.env.addr, request("/generate", p.headers, escapedKeysBody), loadTimeout)
			if (err != nil || status != http.StatusOK) && !failed[p.name] {
				failed[p.name] = true
				a.Errorf("%s, escaped bootstrap keys: got %d %.200s (%v); want 200", p.name, status, body, err)
			}
			leaked[p.name] += a.canaries() - before
		}
	})
	for _, p := range paths {
		if n := leaked[p.name]; n > 0 {
			a.Errorf("%s: the client's bootstrap_host reached the workers %d times", p.name, n)
		}
	}
}
