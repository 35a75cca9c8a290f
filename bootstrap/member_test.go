package bootstrap

import (
	"strings"
	"testing"
)

func TestMember(t *testing.T) {
	f := func(body, name, want string) {
		t.Helper()
		got := Member([]byte(body), name)
		if want == "" && got != nil || string(got) != want {
			t.Fatalf("Member(%q, %q): got %q; want %q", body, name, got, want)
		}
	}
	f(`{"rid": "a"}`, "rid", `"a"`)
	f(`{"text": "x", "rid": ["a", "b"]}`, "rid", `["a", "b"]`)
	// As a worker's json.loads reads it: the last duplicate of the
	// decoded key.
	f(`{"rid": "a", "rid": "b"}`, "rid", `"b"`)
	f(`{"rid": "a", "r\u0069d": "b"}`, "rid", `"b"`)
	f(`{"\u0072\u0069\u0064": "b", "rid": "a"}`, "rid", `"a"`)
	f(`{"abort_all": true, "abort\u005fall": false}`, "abort_all", `false`)
	// Other names, nested members and strings are not the member.
	f(`{"rid\u0000": "a", "ri": "b", "rids": "c", "r\u00edd": "d"}`, "rid", "")
	f(`{"x": {"rid": "a"}, "y": "\"rid\": \"b\""}`, "rid", "")
	// Nothing is read from what is not an object.
	f(`["rid", "a"]`, "rid", "")
	f(`{"rid": "a"`, "rid", "")
	f(``, "rid", "")

	body := []byte(`{"text": "x", "rid": "a", "r\u0069d": "b"}`)
	if n := testing.AllocsPerRun(100, func() { Member(body, "rid") }); n != 0 {
		t.Fatalf("Member: got %v allocs; want 0", n)
	}
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "BUG: ") {
			t.Fatalf("Member with a name too long: got %v; want a BUG panic", r)
		}
	}()
	Member(body, strings.Repeat("x", maxFieldLen+1))
}
