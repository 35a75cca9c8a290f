package bootstrap

import "testing"

func TestRoutingKey(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"text": "You are a helper.\n\nWhat is 2+2?"}`, `You are a helper.\n\nWhat is 2+2?`},
		{`{"text": "a \"quoted\" word", "stream": true}`, `a \"quoted\" word`},
		{`{"text": ["first prompt", "second"]}`, `first prompt`},
		{`{"text": [], "input_ids": [1, 2]}`, ``},
		{`{"text": null, "input_ids": [101, 2023, 2003]}`, `[101, 2023, 2003]`},
		{`{"input_ids": [[7, 8], [9]]}`, `[7, 8]`},
		{`{"prompt": "Once upon a time"}`, `Once upon a time`},
		{`{"prompt": ["p1", "p2"]}`, `p1`},
		{`{"prompt": [[1, 2], [3]]}`, `[1, 2]`},
		{`{"model": "m", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]}`,
			`[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]`},
		{`{"text": "", "sampling_params": {}}`, ``},
		{`{"sampling_params": {"max_new_tokens": 8}}`, ``},
		{`{"text": 42}`, ``},
		// The last of duplicates is the prompt the workers see.
		{`{"text": "old", "text": "new"}`, `new`},
		// text wins over the others, as the workers read it.
		{`{"messages": [{"role": "user", "content": "c"}], "text": "t"}`, `t`},
	} {
		r, err := Parse([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := string(r.RoutingKey.Of([]byte(tc.body))); got != tc.want {
			t.Errorf("%s: routing key %q; want %q", tc.body, got, tc.want)
		}
	}
}
