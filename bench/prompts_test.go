package bench

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadPrompts(t *testing.T) {
	file := strings.Join([]string{
		`{"prompt":"Hello \"world\"","max_new_tokens":8}`,
		``,
		`  `,
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":3}`,
		`{"prompt":"plain", "other": 1}`,
		`{"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[]}],"max_new_tokens":null}`,
		`{"prompt":"either","max_new_tokens":null,"max_tokens":4}`,
		// A null system message once made a leading "\n"; an image alone
		// or an empty text part, stray newlines.
		`{"messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]},{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"Describe."}]},{"role":"user","content":""}]}`,
	}, "\n")
	got, err := ReadPrompts(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{
		{Text: `Hello "world"`, MaxNewTokens: 8},
		{
			Text:         "Be brief.\nHi",
			Messages:     []byte(`[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}]`),
			MaxNewTokens: 3,
		},
		{Text: "plain"},
		{
			Text:     "Weather?",
			Messages: []byte(`[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[]}]`),
		},
		{Text: "either", MaxNewTokens: 4},
		{
			Text:     "Describe.",
			Messages: []byte(`[{"role":"system","content":null},{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]},{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"Describe."}]},{"role":"user","content":""}]`),
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
}

// TestReadPromptsBOM reads a file that starts with a UTF-8 byte-order
// mark, which the first line once failed on.
func TestReadPromptsBOM(t *testing.T) {
	got, err := ReadPrompts(strings.NewReader("\ufeff{\"prompt\":\"a\"}\r\n\ufeff{\"prompt\":\"b\"}\n"))
	if err == nil {
		t.Fatalf("got %+v; want an error on line 2: a mark there is not at the start of the file", got)
	}
	if want := "line 2: not JSON"; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got error %v; want one starting %q", err, want)
	}
	got, err = ReadPrompts(strings.NewReader("\ufeff{\"prompt\":\"a\"}\n"))
	if err != nil || len(got) != 1 || got[0].Text != "a" {
		t.Fatalf("got %+v, error %v; want one prompt %q", got, err, "a")
	}
}

func TestReadPromptsErrors(t *testing.T) {
	f := func(file, want string) {
		t.Helper()
		_, err := ReadPrompts(strings.NewReader(file))
		if err == nil || err.Error() != want {
			t.Fatalf("file %q: got error %v; want %q", file, err, want)
		}
	}
	good := `{"prompt":"a"}` + "\n"
	f("", "no prompts")
	f("\n\n", "no prompts")
	f(good+good+`{"prompt":"a"`, `line 3: not JSON: cannot parse JSON: cannot parse object: unexpected end of object; unparsed tail: ""`)
	f(good+`["a"]`, "line 2: not a JSON object")
	f(good+"\n"+`{"text":"a"}`, `line 3: want a "prompt" string or a "messages" list`)
	f(`{"prompt":"a","messages":[]}`, `line 1: has both "prompt" and "messages"`)
	f(`{"prompt":3}`, `line 1: "prompt" is not a non-empty string`)
	f(`{"prompt":""}`, `line 1: "prompt" is not a non-empty string`)
	f(`{"messages":[]}`, `line 1: "messages" is not a non-empty list`)
	f(`{"messages":{"role":"user"}}`, `line 1: "messages" is not a non-empty list`)
	f(`{"messages":[{"role":"user","content":"a"},{"content":"b"}]}`, `line 1: message 2 has no "role" string`)
	f(`{"messages":["hi"]}`, `line 1: message 1 has no "role" string`)
	f(`{"messages":[{"role":"user","content":7}]}`, `line 1: message 1 has no "content" string or list of text parts`)
	f(`{"prompt":"a","max_new_tokens":0}`, `line 1: "max_new_tokens" is not an integer from 1 to 1048576`)
	f(`{"prompt":"a","max_tokens":"8"}`, `line 1: "max_tokens" is not an integer from 1 to 1048576`)
	f(`{"prompt":"a","max_tokens":2.5}`, `line 1: "max_tokens" is not an integer from 1 to 1048576`)
	f(`{"prompt":"a","max_tokens":2,"max_new_tokens":2}`, `line 1: has both "max_new_tokens" and "max_tokens"`)
}
