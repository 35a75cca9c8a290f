package bootstrap

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	f := func(body, wantErr string) {
		t.Helper()
		err := validate([]byte(body))
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("validate(%q): unexpected error: %s", body, err)
		case wantErr != "" && err == nil:
			t.Fatalf("validate(%q): expecting an error containing %q", body, wantErr)
		case wantErr != "" && !strings.Contains(err.Error(), wantErr):
			t.Fatalf("validate(%q): got error %q; want one containing %q", body, err, wantErr)
		}
		if valid := json.Valid([]byte(body)); valid != (err == nil) && !pythonOnly(body) {
			t.Fatalf("validate(%q): got error %v, but encoding/json's Valid says %v", body, err, valid)
		}
	}
	f(`{}`, "")
	f(` [ ] `, "")
	f(`{"a":[1,-2.5e+3,0,-0,1E9,0.125],"b":{"c":null,"d":true,"e":false},"f":[{},[]]}`, "")
	f(`"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00 \ud800"`, "")
	f(`"\\"`, "")
	f(`"a\\\"b"`, "")
	f("\"caf\xc3\xa9 \xff\"", "") // not UTF-8 either: neither checks
	f(`12`, "")

	f(``, "unexpected end of body")
	f(`"abc`, "unterminated string at offset 0")
	f(`"abc\"`, "unterminated string at offset 0")
	f(`"abc\`, "invalid escape at offset 4")
	f(`"\u12"`, "invalid escape at offset 1")
	f(`"\u12`, "invalid escape at offset 1")
	f(`"\u12"}`+strings.Repeat(" ", 9), "invalid escape at offset 1")
	f(`"\a"`, "invalid escape at offset 1")
	f("\"ab\tc\"", "a string holds a raw control character at offset 3")
	f("\"\\n\x00\"", "a string holds a raw control character at offset 3")
	f("\"\x7f\"", "")
	f(`{"a" "b"}`, "expected ':' at offset 5")
	f(`{1:2}`, "expected a key at offset 1")
	f(`{"a":1,"b"}`, "expected ':' at offset 10")
	f(`[1,]`, "unexpected ']' at offset 3")
	f(`[1 2]`, "expected ',' or ']' at offset 3")
	f(`{"a":1]`, "expected ',' or '}' at offset 6")
	f(`[1,2`, "unexpected end of body")
	f(`[`, "unexpected end of body")
	f(`{"a":`, "unexpected end of body")
	f(`1 2`, "unexpected data after the value at offset 2")
	f(`-`, "invalid number at offset 0")
	f(`-a`, "invalid number at offset 0")
	f(`.5`, "unexpected '.' at offset 0")
	f(`1.e5`, "invalid number at offset 0")
	f(`1e`, "invalid number at offset 0")
	f(`+1`, "unexpected '+' at offset 0")
	f(`[01]`, "expected ',' or ']' at offset 2")
	f(`[truee]`, "expected ',' or ']' at offset 5")
	f(`[nul]`, "expected null at offset 1")
	f(`fals`, "expected false at offset 0")
	// Python's json.loads takes these three; nothing else of the kind.
	f(`[NaN, Infinity, -Infinity, {"a": -Infinity}]`, "")
	f(`nan`, "expected null at offset 0")
	f(`[NaNa]`, "expected ',' or ']' at offset 4")
	f(`Inf`, "expected Infinity at offset 0")
	f(`-Inf`, "expected -Infinity at offset 0")
	f(`+Infinity`, "unexpected '+' at offset 0")
	f(`-NaN`, "invalid number at offset 0")
	f("\xef\xbb\xbf{}", `unexpected '\xef' at offset 0`)

	if err := validate([]byte(strings.Repeat("[", maxDepth+1))); !errors.Is(err, errTooDeep) {
		t.Fatalf("validate of %d '[': got error %v; want %q", maxDepth+1, err, errTooDeep)
	}
	ok := strings.Repeat(`{"a":[`, maxDepth/2) + strings.Repeat("]}", maxDepth/2)
	if err := validate([]byte(ok)); err != nil {
		t.Fatalf("validate at depth %d: unexpected error: %s", maxDepth, err)
	}
}

// TestValidateLongStrings moves a control character, an escape and the
// closing quote across the eight-byte steps of the string scan.
func TestValidateLongStrings(t *testing.T) {
	for n := range 40 {
		text := strings.Repeat("x", n)
		for at := range n {
			body := `"` + text[:at] + "\x1f" + text[at+1:] + `"`
			err := validate([]byte(body))
			if want := "raw control character at offset " + strconv.Itoa(1+at); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("validate(%q): got error %v; want one containing %q", body, err, want)
			}
			for _, esc := range []string{`\"`, `\\`, `\u0041`, `\n`} {
				body := `"` + text[:at] + esc + text[at:] + `"`
				if err := validate([]byte(body)); err != nil {
					t.Fatalf("validate(%q): unexpected error: %s", body, err)
				}
			}
			body = `"` + text[:at] + `\x` + text[at:] + `"`
			if err := validate([]byte(body)); err == nil {
				t.Fatalf("validate(%q): expecting an error", body)
			}
		}
		if err := validate([]byte(`"` + text + `"`)); err != nil {
			t.Fatalf("validate of a string of %d bytes: unexpected error: %s", n, err)
		}
		for _, c := range []string{"\x80", "\xa0", "\xff", " ", "~"} {
			body := `"` + strings.Repeat(c, n) + `"`
			if err := validate([]byte(body)); err != nil {
				t.Fatalf("validate(%q): unexpected error: %s", body, err)
			}
		}
	}
}

// FuzzValidate holds validate to encoding/json's Valid, within the depth
// bound.
func FuzzValidate(f *testing.F) {
	for _, body := range seedBodies {
		f.Add([]byte(body))
	}
	for _, body := range []string{`"\u12"`, `[1,]`, `-`, `1.e5`, "\"\\n\x00\"", `[nul]`, `"a\\\"b"`} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := validate(body)
		if errors.Is(err, errTooDeep) {
			return
		}
		if valid := json.Valid(body); valid != (err == nil) && !pythonOnly(string(body)) {
			t.Fatalf("validate(%q): got error %v, but encoding/json's Valid says %v", body, err, valid)
		}
	})
}

// pythonOnly reports whether body may hold the numbers only Python's
// json.loads takes (NaN, Infinity), where encoding/json's Valid is no
// judge.
func pythonOnly(body string) bool {
	return strings.Contains(body, "NaN") || strings.Contains(body, "Infinity")
}
