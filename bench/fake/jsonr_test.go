package fake

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestLoadJSONLastWins(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		var p fastjson.Parser
		v, err := loadJSON(&p, []byte(in))
		if err != nil {
			t.Fatalf("cannot load %s: %v", in, err)
		}
		if got := string(v.MarshalTo(nil)); got != want {
			t.Errorf("loadJSON(%s): got %s; want %s", in, got, want)
		}
	}
	f(`{}`, `{}`)
	f(`{"a":1}`, `{"a":1}`)
	f(`{"a":1,"b":2}`, `{"a":1,"b":2}`)
	f(`{"a":1,"a":2}`, `{"a":2}`)
	f(`{"a":1,"b":2,"a":3}`, `{"b":2,"a":3}`)
	f(`{"a":1,"a":2,"a":3}`, `{"a":3}`)
	f(`{"a":1,"b":1,"a":2,"b":2,"c":0}`, `{"a":2,"b":2,"c":0}`)
	f(`{"a":{"b":1,"b":2},"a":3}`, `{"a":3}`)
	f(`{"a":3,"a":{"b":1,"b":2}}`, `{"a":{"b":2}}`)
	f(`{"s":{"n":1,"n":2}}`, `{"s":{"n":2}}`)
	f(`[{"x":1,"x":2},[{"y":1,"y":2}],3]`, `[{"x":2},[{"y":2}],3]`)
	f(`{"m":[{"c":"a","c":"b"}]}`, `{"m":[{"c":"b"}]}`)
	// Keys compare unescaped, as Python's.
	f(`{"stream":false,"stre\u0061m":true}`, `{"stream":true}`)
	f(`"x"`, `"x"`)

	// More keys than the quadratic scan takes.
	var in, want strings.Builder
	in.WriteString("{")
	want.WriteString("{")
	for i := range 20 {
		k := strconv.Itoa(i)
		in.WriteString(`"k` + k + `":0,`)
		if i > 0 {
			want.WriteString(",")
		}
		want.WriteString(`"k` + k + `":` + k)
	}
	for i := range 20 {
		if i > 0 {
			in.WriteString(",")
		}
		in.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	in.WriteString("}")
	want.WriteString("}")
	f(in.String(), want.String())
}

// Regression: the fake let the first of duplicate keys win, where SGLang's
// json.loads lets the last win, so {"stream":false,"stream":true} was no
// stream to the fake. Every field the fakes read must follow Python.
func TestDuplicateKeysLastWins(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	for _, c := range []struct {
		name, path, body string
		check            func(t *testing.T, res result)
	}{
		{"generate stream", "/generate", `{"text":"a","stream":false,"stream":true}`, isStream(true)},
		{"generate no stream", "/generate", `{"text":"a","stream":true,"stream":false}`, isStream(false)},
		{"chat stream", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"stream":false,"stream":true}`, isStream(true)},
		{"text batch", "/generate", `{"text":"a","text":["a","b"]}`, func(t *testing.T, res result) {
			t.Helper()
			if got := len(parseJSON(t, res.body).GetArray()); got != 2 {
				t.Errorf("got %d answers; want 2: %s", got, res.body)
			}
		}},
		{"input_ids", "/generate", `{"input_ids":[1],"input_ids":[1,2,3]}`, metaInfo("prompt_tokens", "3")},
		{"sampling_params", "/generate",
			`{"text":"a","sampling_params":{"max_new_tokens":1},"sampling_params":{"max_new_tokens":3}}`,
			metaInfo("completion_tokens", "3")},
		{"nested max_new_tokens", "/generate", `{"text":"a","sampling_params":{"max_new_tokens":1,"max_new_tokens":2}}`,
			metaInfo("completion_tokens", "2")},
		{"rid", "/generate", `{"text":"a","rid":"first","rid":"last"}`, metaInfo("id", `"last"`)},
		{"return_logprob", "/generate", `{"text":"a","return_logprob":true,"return_logprob":false}`,
			func(t *testing.T, res result) {
				t.Helper()
				if parseJSON(t, res.body).Exists("meta_info", "input_token_logprobs") {
					t.Errorf("got logprobs; want none: %s", res.body)
				}
			}},
		{"max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":1,"max_tokens":2}`, func(t *testing.T, res result) {
			t.Helper()
			if got := str(parseJSON(t, res.body), "usage", "completion_tokens"); got != "2" {
				t.Errorf("got completion_tokens %s; want 2: %s", got, res.body)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := do(t, n, "POST", "agg:30000", c.path, c.body)
			if res.status != 200 {
				t.Fatalf("got %d %s; want 200", res.status, res.body)
			}
			c.check(t, res)
		})
	}
}

// isStream checks whether an answer is an SSE stream.
func isStream(want bool) func(*testing.T, result) {
	return func(t *testing.T, res result) {
		t.Helper()
		if got := strings.HasPrefix(res.contentType, "text/event-stream"); got != want {
			t.Errorf("got stream %v (%s); want %v", got, res.contentType, want)
		}
	}
}

// metaInfo checks a /generate answer's meta_info.key.
func metaInfo(key, want string) func(*testing.T, result) {
	return func(t *testing.T, res result) {
		t.Helper()
		if got := str(parseJSON(t, res.body), "meta_info", key); got != want {
			t.Errorf("got meta_info.%s %s; want %s: %s", key, got, want, res.body)
		}
	}
}

// The bootstrap fields too: a decode reads the last room, host and port.
func TestDuplicateBootstrapFieldsLastWins(t *testing.T) {
	n, _, d := newPD(t, Config{}, Config{})
	fields := `"text":"a","sampling_params":{"max_new_tokens":2}`
	pbody := pdBody(fields, "prefill", "8998", 7)
	dbody := `{` + fields + `,"bootstrap_host":"nowhere","bootstrap_port":1,"bootstrap_room":99,` +
		`"bootstrap_host":"prefill","bootstrap_port":8998,"bootstrap_room":7}`
	pres, dres := both(t, n, "/generate", pbody, dbody)
	if pres.status != 200 || dres.status != 200 {
		t.Fatalf("got status %d, %d; want 200, 200: %s %s", pres.status, dres.status, pres.body, dres.body)
	}
	res := do(t, n, "POST", decodeAddr, "/generate", `{"text":"a","bootstrap_room":7,"bootstrap_room":null}`)
	if res.status != 400 || !strings.Contains(res.body, "without bootstrap room id") {
		t.Errorf("room null last: got %d %s; want the 400 of a request without a room", res.status, res.body)
	}
	if got := d.Stats().RejectedNoRoom; got != 1 {
		t.Errorf("got RejectedNoRoom %d; want 1", got)
	}
}

// json.loads takes Infinity and -Infinity, and NaN; fastjson took only NaN
// and Inf. Strings keep their Infinity.
func TestLoadJSONInfinity(t *testing.T) {
	var p fastjson.Parser
	v, err := loadJSON(&p, []byte(`{"a":Infinity,"b":[-Infinity,NaN],"s":"Infinity \"Infinity\""}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b, nan := v.GetFloat64("a"), v.GetFloat64("b", "0"), v.GetFloat64("b", "1")
	if !math.IsInf(a, 1) || !math.IsInf(b, -1) || !math.IsNaN(nan) {
		t.Errorf("got a %v, b %v, %v; want +Inf, -Inf, NaN", a, b, nan)
	}
	if s := string(v.GetStringBytes("s")); s != `Infinity "Infinity"` {
		t.Errorf("got string %q; want it unchanged", s)
	}
}

// "stream" is read as pydantic reads a bool: "false" is no stream, though a
// non-empty string is truthy in Python.
func TestStreamFieldAsPydanticReadsIt(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	for body, want := range map[string]bool{
		`{"text":"a","stream":"false"}`: false,
		`{"text":"a","stream":"No"}`:    false,
		`{"text":"a","stream":"0"}`:     false,
		`{"text":"a","stream":"true"}`:  true,
		`{"text":"a","stream":1}`:       true,
	} {
		res := do(t, n, "POST", "agg:30000", "/generate", body)
		isStream(want)(t, res)
	}
}
