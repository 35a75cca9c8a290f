package bootstrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// seedBodies seed both fuzz targets and TestAppendDecodes. Most are valid
// objects; the rest are near misses.
var seedBodies = []string{
	chatBody, generateBody, batchBody,
	`{}`, ` { } `, "\n{\r\n\t}\n", `{"a":1}`, `{"a":null,"b":true,"c":false}`,
	`{"bootstrap_room":7,"a":1}`, `{"a":1,"bootstrap_host":"x","b":2}`, `{"a":1,"bootstrap_port":1}`,
	`{"bootstrap_room":7}`, `{"bootstrap_room":1,"a":1,"bootstrap_room":2,"bootstrap_host":"h","b":[]}`,
	`{ "bootstrap_room" : 1 , "a" : 1 , "bootstrap_port" : 2 , "b" : 2 }`,
	`{"sampling_params":{"bootstrap_room":5},"a":[{"bootstrap_host":"x"}]}`,
	`{"bootstrap\u005froom":1,"bootstrap_room":2}`, `{"bootstrap_host":{"bootstrap_host":[]}}`,
	`{"a":1e400,"b":-0.0,"c":12345678901234567890123,"d":1.50,"e":1E+2,"f":1e-400}`,
	`{"a":"caf\u00e9 ☕ \ud83d\ude00","b":"\"bootstrap_room\":1","c\"d":"\\","e":"\/"}`,
	`{"a":"\ud800","\u0000":"\u001f"}`, "{\"\xff\":\"\xfe\"}",
	`{"text":["a","b"]}`, `{"text":[]}`, `{"text":"hi"}`, `{"text":null,"input_ids":[[1],[2,3]]}`,
	`{"input_ids":[[1,2],[3]]}`, `{"input_ids":[1,2,3]}`, `{"input_ids":[]}`, `{"text":{"a":[]}}`,
	`{"str\u0065am":true,"return_logprob":0.0,"return_routed_experts":null}`,
	`{"stream":1,"stream":[],"return_logprob":"x","return_logprob":{}}`,
	`{"a":[[[[{"b":[{}]}]]]],"c":[1,[2,[3,[4]]]]}`,
	`{"a":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`,
	`{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`,
	``, ` `, `[]`, `[{}]`, `"x"`, `0`, `null`, `{`, `}`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `{"a":[}`,
	`{"a":{]}`, `{"a":"\"}`, `{"a":1}x`, `{"a":01}`, `{"a":tru}`, `{"a":1 "b":2}`, `{"a":"\x"}`,
	`{"text":[1 2]}`, `{"\`, `{"a\`, "\xef\xbb\xbf{}",
}

func FuzzParse(f *testing.F) {
	for _, body := range seedBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		valid := json.Valid(body)
		object := valid && body[skipSpace(body, 0)] == '{'
		switch {
		case err == nil && !object:
			t.Fatalf("Parse(%q) accepted a body that is not a JSON object", body)
		case err == nil:
			if r.PromptTokens < 0 || r.Batch >= 0 && r.PromptTokens != 0 {
				t.Fatalf("Parse(%q): got PromptTokens %d for batch %d", body, r.PromptTokens, r.Batch)
			}
			r.PromptTokens = 0 // an estimate; TestParsePromptTokens checks it
			if want := wantRequest(t, body); r != want {
				t.Fatalf("Parse(%q): got %+v; want %+v", body, r, want)
			}
		case errors.Is(err, ErrBadDPRank):
		case errors.Is(err, errTooDeep):
		case object:
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		case valid && !errors.Is(err, ErrNotObject):
			t.Fatalf("Parse(%q): got error %q; want one wrapping %q", body, err, ErrNotObject)
		case !valid && !errors.Is(err, ErrNotJSON):
			t.Fatalf("Parse(%q): got error %q; want one wrapping %q", body, err, ErrNotJSON)
		case strings.Contains(err.Error(), "control character") && !bytes.ContainsFunc(body, unicode.IsControl):
			t.Fatalf("Parse(%q): got error %q for a body without control characters", body, err)
		}
	})
}

func FuzzAppend(f *testing.F) {
	for i, body := range seedBodies {
		f.Add([]byte(body), []string{"10.0.0.5", "[::1]", "", "a\"\\\x00\xff"}[i%4], i%3*8998-1, uint64(i)<<58, i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, body []byte, host string, port int, room uint64, batch bool) {
		fields := Fields{Host: host, Port: port, Rooms: []uint64{room & MaxRoom}, Batch: batch}
		r, err := Parse(body)
		fits := err == nil && (!batch || r.Batch >= 0)
		if fits && batch {
			fields.Rooms = make([]uint64, r.Batch)
			for i := range fields.Rooms {
				fields.Rooms[i] = (room + uint64(i)) & MaxRoom
			}
		}
		out, err := Append([]byte("dst"), body, fields)
		if err != nil {
			if string(out) != "dst" {
				t.Fatalf("Append(%q) on error: got dst %q; want %q", body, out, "dst")
			}
		} else if !bytes.HasPrefix(out, []byte("dst")) {
			t.Fatalf("Append(%q): got %q, which lost dst", body, out)
		}
		switch {
		case fits && err != nil:
			t.Fatalf("Append(%q, %+v): unexpected error: %s", body, fields, err)
		case fits:
			checkAppended(t, body, out[len("dst"):], fields)
		case batch && err == nil && json.Valid(body):
			t.Fatalf("Append(%q, %+v) accepted Batch fields for a body that is not a batch", body, fields)
		}
	})
}

// checkAppended fails t unless out is what Append should make of the valid
// JSON object body and fields f.
func checkAppended(t *testing.T, body, out []byte, f Fields) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("Append(%q): got %q, which is not valid JSON", body, out)
	}
	host, port, room := wantFields(f)

	// Independently of the package's scanner: the output decodes to the
	// input plus the fields, which come last, after the other members in
	// their order and with their values byte for byte.
	want := decodeObject(t, body)
	want["bootstrap_host"], want["bootstrap_port"], want["bootstrap_room"] = host, port, room
	if got := decodeObject(t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("Append(%q): got %q, which decodes to %v; want %v", body, out, got, want)
	}
	in, got := rawMembers(t, body), rawMembers(t, out)
	if len(got) < 3 {
		t.Fatalf("Append(%q): got %q, with fewer than 3 members", body, out)
	}
	last := got[len(got)-3:]
	for i, name := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"} {
		if last[i].key != name {
			t.Fatalf("Append(%q): got %q, whose member %d from the end is %q; want %q", body, out, 3-i, last[i].key, name)
		}
	}
	isBootstrap := func(m keyValue) bool { return isBootstrapKey([]byte(m.key)) }
	in = slices.DeleteFunc(in, isBootstrap)
	got = slices.DeleteFunc(got[:len(got)-3], isBootstrap)
	if !slices.Equal(got, in) {
		t.Fatalf("Append(%q): got %q, whose other members are %q; want %q", body, out, got, in)
	}

	// With the package's scanner: raw keys equal to the three names appear
	// exactly once each, last, and every other member is byte-identical.
	inOthers, _ := scannedMembers(t, body)
	gotOthers, gotNames := scannedMembers(t, out)
	if want := []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}; !slices.Equal(gotNames, want) {
		t.Fatalf("Append(%q): got %q, whose bootstrap members are %q; want %q", body, out, gotNames, want)
	}
	if !slices.Equal(gotOthers, inOthers) {
		t.Fatalf("Append(%q): got %q, whose other members are %q; want %q", body, out, gotOthers, inOthers)
	}
}

// wantFields returns the three fields as encoding/json decodes them.
func wantFields(f Fields) (host, port, room any) {
	quoted, _ := json.Marshal(f.Host)
	var h string
	_ = json.Unmarshal(quoted, &h)
	host = h
	if f.Port > 0 {
		port = json.Number(strconv.Itoa(f.Port))
	}
	if !f.Batch {
		return host, port, json.Number(strconv.FormatUint(f.Rooms[0], 10))
	}
	hosts, ports, rooms := []any{}, []any{}, []any{}
	for _, r := range f.Rooms {
		hosts, ports = append(hosts, host), append(ports, port)
		rooms = append(rooms, json.Number(strconv.FormatUint(r, 10)))
	}
	return hosts, ports, rooms
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("cannot decode %q: %s", b, err)
	}
	return m
}

type keyValue struct{ key, value string }

// rawMembers lists the top-level members of b with encoding/json: keys
// decoded, values raw.
func rawMembers(t *testing.T, b []byte) []keyValue {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("cannot decode %q: %s", b, err)
	}
	var ms []keyValue
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatalf("cannot decode %q: %s", b, err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("cannot decode %q: %s", b, err)
		}
		ms = append(ms, keyValue{key.(string), string(v)})
	}
	return ms
}

// scannedMembers lists, with the package's scanner, the raw top-level
// members of b whose raw key is not one of the three names, and the names
// of those that are.
func scannedMembers(t *testing.T, b []byte) (others, names []string) {
	t.Helper()
	ms, err := newMembers(b)
	for err == nil {
		var m member
		var ok bool
		if m, ok, err = ms.next(); !ok {
			break
		}
		if isBootstrapKey(m.key) {
			names = append(names, string(m.key))
		} else {
			others = append(others, string(b[m.start:m.end]))
		}
	}
	if err != nil {
		t.Fatalf("cannot scan %q: %s", b, err)
	}
	return others, names
}

// wantRequest is what Parse should return for the valid JSON object body,
// worked out from encoding/json's decoding and Python's rules.
func wantRequest(t *testing.T, body []byte) Request {
	t.Helper()
	m := decodeObject(t, body)
	r := Request{Batch: -1}
	r.Stream = pyTruthy(m["stream"])
	_, r.HasReturnLogprob = m["return_logprob"]
	r.ReturnLogprob = pyTruthy(m["return_logprob"])
	_, r.HasReturnRoutedExperts = m["return_routed_experts"]
	if text, ok := m["text"]; ok && text != nil {
		if list, ok := text.([]any); ok {
			r.Batch = len(list)
		}
	} else if ids, ok := m["input_ids"].([]any); ok && len(ids) > 0 {
		if _, ok := ids[0].([]any); ok {
			r.Batch = len(ids)
		}
	}
	r.PrefillDPRank = wantRank(m["disagg_prefill_dp_rank"])
	r.RoutedDPRank = wantRank(m["routed_dp_rank"])
	if _, ok := m["routed_dp_rank"]; !ok {
		r.RoutedDPRank = wantRank(m["data_parallel_rank"])
	}
	return r
}

// wantRank is a decoded DP-rank value as Parse reads it; Parse rejects the
// values that are neither integers nor null.
func wantRank(v any) DPRank {
	if n, ok := v.(json.Number); ok {
		if i, err := strconv.Atoi(string(n)); err == nil {
			return DPRank{Set: true, Rank: i}
		}
	}
	return DPRank{}
}

func pyTruthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	case json.Number:
		if n, ok := new(big.Int).SetString(string(v), 10); ok {
			return n.Sign() != 0
		}
		f, _ := strconv.ParseFloat(string(v), 64)
		return f != 0
	}
	panic("BUG: unexpected decoded type")
}
