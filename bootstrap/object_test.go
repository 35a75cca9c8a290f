package bootstrap

import (
	"errors"
	"testing"
)

// CheckObject tells a body that is not a JSON object what Parse tells it,
// so that /abort_request answers as the generate routes do; it takes any
// object, whatever its members, as a route without generation fields must.
func TestCheckObject(t *testing.T) {
	f := func(body string) {
		t.Helper()
		_, want := Parse([]byte(body))
		got := CheckObject([]byte(body))
		if got == nil || want == nil || got.Error() != want.Error() {
			t.Errorf("CheckObject(%q): got %v; want Parse's error %v", body, got, want)
		}
		if !errors.Is(got, ErrNotObject) && !errors.Is(got, ErrNotJSON) {
			t.Errorf("CheckObject(%q): got %v; want one wrapping ErrNotObject or ErrNotJSON", body, got)
		}
	}
	f(``)
	f(" \n\t")
	f(`rid=abcdefghijk`)
	f(`text=hi`)
	f(`[1,2]`)
	f(`"text"`)
	f(`null`)
	f(`{`)
	f(`{"rid":"abc`)
	f(`{"a":1,}`)
	f(`{"a":[1}`)

	for _, body := range []string{`{}`, ` {"rid": "abcdefghijk"} `, `{"abort_all": true}`,
		`{"rid": "a", "routed_dp_rank": "not a rank"}`, `{"x": NaN}`} {
		if err := CheckObject([]byte(body)); err != nil {
			t.Errorf("CheckObject(%q): got %v; want nil", body, err)
		}
	}
}
