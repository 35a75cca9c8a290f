package bootstrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/valyala/fastjson"

	"pdlb/bench/fake"
)

// seedBodies seed both fuzz targets and TestAppendDecodes. Most are valid
// objects; the rest are near misses.
var seedBodies = []string{
	chatBody, generateBody, batchBody,
	`{}`, ` { } `, "\n{\r\n\t}\n", `{"a":1}`, `{"a":null,"b":true,"c":false}`,
	`{"bootstrap_room":7,"a":1}`, `{"a":1,"bootstrap_host":"x","b":2}`, `{"a":1,"bootstrap_port":1}`,
	`{"rid":"r-1","text":"a"}`, `{"rid":"decoy","r\u0069d":["a","b"],"text":["x","y"]}`, `{"rid":null}`,
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
	// Keys spelled with escapes, and duplicates: the workers' json.loads
	// decodes every key and keeps the last of each name (issue 19).
	`{"bootstrap\u005fhost":"evil","bootstrap\u005fport":1,"bootstrap\u005froom":7,"text":"a"}`,
	`{"\u0062ootstrap_room":1,"bootstrap_room":2,"bootstrap\u005Froom":3}`,
	`{"do\u005flocal\u005fprefill":true,"do_local_prefill":false,"input_ids":[[1],[2]]}`,
	`{"disagg\u005fprefill\u005fdp\u005frank":0,"routed_dp_rank":1,"routed\u005fdp\u005frank":null,"data_parallel_rank":2}`,
	`{"stream":true,"stre\u0061m":false,"return_logprob":1,"r\u0065turn_logprob":null}`,
	`{"t\u0065xt":["a","b"],"text":"c","input_ids":[[1]],"input\u005fids":[[1],[2]]}`,
	`{"bootstrap_host\u0000":"x","bootstrap_hos\u0074":"y","do_local_prefill\/":1}`,
	`{"a":NaN,"b":Infinity,"c":-Infinity,"stream":NaN,"bootstrap_room":Infinity}`,
}

func FuzzParse(f *testing.F) {
	for _, body := range seedBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		valid := json.Valid(body)
		if !valid && pythonOnly(string(body)) {
			// encoding/json is no judge of validity here (NaN,
			// Infinity), but the fake's reader is of what Parse read.
			if err == nil {
				checkParsed(t, body, r)
			}
			return
		}
		object := valid && body[skipSpace(body, 0)] == '{'
		switch {
		case err == nil && !object:
			t.Fatalf("Parse(%q) accepted a body that is not a JSON object", body)
		case err == nil:
			checkParsed(t, body, r)
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

// checkParsed fails t unless r, which Parse returned for body, is what a
// worker reads in body.
func checkParsed(t *testing.T, body []byte, r Request) {
	t.Helper()
	if r.PromptTokens < 0 || r.Batch >= 0 && r.PromptTokens != 0 {
		t.Fatalf("Parse(%q): got PromptTokens %d for batch %d", body, r.PromptTokens, r.Batch)
	}
	r.PromptTokens = 0 // an estimate; TestParsePromptTokens checks it
	if want := wantRequest(t, body, r); r != want {
		t.Fatalf("Parse(%q): got %+v; want %+v", body, r, want)
	}
}

// appendMode is what FuzzAppend makes of a body: the bodies of pdlb's
// paths.
const (
	modePD        = iota // a PD pair's decode: the bootstrap fields
	modePrefillDP        // a prefill with a planned DP rank: both rank fields too
	modeLocal            // a decode that prefills locally (decode-only)
	modeStrip            // a fallback worker (decode-only): nothing pdlb owns
	numAppendModes
)

func FuzzAppend(f *testing.F) {
	for i, body := range seedBodies {
		f.Add([]byte(body), []string{"10.0.0.5", "[::1]", "", "a\"\\\x00\xff"}[i%4], i%3*8998-1, uint64(i)<<58, i%2 == 0, uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, host string, port int, room uint64, batch bool, mode uint8) {
		fields := Fields{Host: host, Port: port, Rooms: []uint64{room & MaxRoom}, Batch: batch}
		mode %= numAppendModes
		switch mode {
		case modePrefillDP:
			rank := DPRank{Set: true, Rank: int(room % 16)}
			fields.PrefillDPRank, fields.RoutedDPRank = rank, rank
		case modeLocal:
			fields = Fields{LocalPrefill: true, Batch: batch} // Batch is ignored
		}
		r, err := Parse(body)
		fits := err == nil && (!fields.Batch || mode == modeLocal || r.Batch >= 0)
		if fits && batch && mode != modeLocal {
			fields.Rooms = make([]uint64, r.Batch)
			for i := range fields.Rooms {
				fields.Rooms[i] = (room + uint64(i)) & MaxRoom
			}
		}
		var out []byte
		if mode == modeStrip {
			out, err = Strip([]byte("dst"), body)
		} else {
			out, err = Append([]byte("dst"), body, fields)
		}
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
		case fits && mode == modeStrip:
			checkSent(t, body, out[len("dst"):], nil)
		case fits:
			checkSent(t, body, out[len("dst"):], &fields)
		case batch && mode <= modePrefillDP && err == nil && json.Valid(body):
			t.Fatalf("Append(%q, %+v) accepted Batch fields for a body that is not a batch", body, fields)
		}
	})
}

// ownedNames are the members pdlb writes for f, in the order Append writes
// them, and those it removes without writing; f nil stands for Strip.
func ownedNames(f *Fields) (written, removed []string) {
	bootstrap := []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}
	switch {
	case f == nil:
		return nil, append(bootstrap, "do_local_prefill")
	case f.LocalPrefill:
		written, removed = []string{"do_local_prefill"}, bootstrap
	default:
		written, removed = bootstrap, []string{"do_local_prefill"}
	}
	if f.PrefillDPRank.Set {
		written = append(written, "disagg_prefill_dp_rank")
	}
	if f.RoutedDPRank.Set {
		written = append(written, "routed_dp_rank")
		removed = append(removed, "data_parallel_rank")
	}
	return written, removed
}

// wantOwned is the value a worker must read for each name in written,
// decoded as goValue decodes it.
func wantOwned(f *Fields, written []string) map[string]any {
	want := make(map[string]any, len(written))
	if !f.LocalPrefill {
		want["bootstrap_host"], want["bootstrap_port"], want["bootstrap_room"] = wantFields(*f)
	}
	want["do_local_prefill"] = true
	want["disagg_prefill_dp_rank"] = json.Number(strconv.Itoa(f.PrefillDPRank.Rank))
	want["routed_dp_rank"] = json.Number(strconv.Itoa(f.RoutedDPRank.Rank))
	for name := range want {
		if !slices.Contains(written, name) {
			delete(want, name)
		}
	}
	return want
}

// checkSent fails t unless out is what Append (Strip when f is nil) should
// make of body, a JSON object Parse accepted, and f. It checks out as the
// workers read it, with the fake's reader (Python's json.loads: decoded
// keys, the last duplicate wins), and as pdlb's own scanner splits it.
func checkSent(t *testing.T, body, out []byte, f *Fields) {
	t.Helper()
	if !json.Valid(out) && !pythonOnly(string(body)) {
		t.Fatalf("Append(%q): got %q, which is not valid JSON", body, out)
	}
	written, removed := ownedNames(f)
	owned := append(slices.Clip(written), removed...)

	// As a worker reads it: pdlb's values for the fields it writes, none
	// for those it removes, and the client's for every other.
	in, got := pyObject(t, body), pyObject(t, out)
	want := make(map[string]any, len(in)+len(written))
	for k, v := range in {
		if !slices.Contains(owned, k) {
			want[k] = v
		}
	}
	if f != nil {
		for k, v := range wantOwned(f, written) {
			want[k] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Append(%q): got %q, which a worker reads as %v; want %v", body, out, got, want)
	}

	// Member by member, keys decoded: each written field once and last, in
	// order; no member of a removed name, under any spelling; every other
	// member byte for byte as the client wrote it, in its order.
	inMembers, gotMembers := listMembers(t, body), listMembers(t, out)
	if len(gotMembers) < len(written) {
		t.Fatalf("Append(%q): got %q, with fewer than %d members", body, out, len(written))
	}
	tail := gotMembers[len(gotMembers)-len(written):]
	for i, name := range written {
		if tail[i].name != name {
			t.Fatalf("Append(%q): got %q, whose member %d from the end is %q; want %q", body, out, len(written)-i, tail[i].name, name)
		}
	}
	isOwned := func(m sentMember) bool { return slices.Contains(owned, m.name) }
	wantOthers := slices.DeleteFunc(inMembers, isOwned)
	gotOthers := gotMembers[:len(gotMembers)-len(written)]
	if !slices.Equal(gotOthers, wantOthers) {
		t.Fatalf("Append(%q): got %q, whose other members are %q; want %q", body, out, gotOthers, wantOthers)
	}
}

// sentMember is one top-level member of a body: its key decoded by
// encoding/json, and its bytes as they are in the body.
type sentMember struct{ name, text string }

// listMembers lists the top-level members of the object b, split by the
// package's scanner, which encoding/json's decoder cannot do with NaN.
func listMembers(t *testing.T, b []byte) []sentMember {
	t.Helper()
	var list []sentMember
	ms, err := newMembers(b)
	for err == nil {
		var m member
		var ok bool
		if m, ok, err = ms.next(); !ok {
			break
		}
		var name string
		if err := json.Unmarshal(b[m.start:m.start+len(m.key)+2], &name); err != nil {
			t.Fatalf("cannot decode the key %q of %q: %s", m.key, b, err)
		}
		list = append(list, sentMember{name, string(b[m.start:m.end])})
	}
	if err != nil {
		t.Fatalf("cannot scan %q: %s", b, err)
	}
	return list
}

// pyObject reads the object b with the fake's reader, as a worker's
// json.loads does, into goValue's types. The fake's reader stops at 300
// levels, well before json.loads and Parse: a deeper body is read with
// encoding/json, whose maps also keep the last duplicate of a decoded key,
// or, when it holds numbers encoding/json refuses too, not checked.
func pyObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	v, err := fake.LoadJSON(b)
	if err != nil && strings.Contains(err.Error(), "too big depth") {
		if pythonOnly(string(b)) {
			t.Skipf("no reader takes %.40q...: nested deeper than 300 levels, with NaN or Infinity", b)
		}
		return decodeObject(t, b)
	}
	if err != nil {
		t.Fatalf("the fake's reader cannot load %q: %s", b, err)
	}
	m, ok := goValue(v).(map[string]any)
	if !ok {
		t.Fatalf("the fake's reader loads %q as %s, not an object", b, v.Type())
	}
	return m
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

// goValue is v in encoding/json's types, numbers as json.Number.
func goValue(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeObject:
		m := map[string]any{}
		v.GetObject().Visit(func(k []byte, e *fastjson.Value) { m[string(k)] = goValue(e) })
		return m
	case fastjson.TypeArray:
		list := []any{}
		for _, e := range v.GetArray() {
			list = append(list, goValue(e))
		}
		return list
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		return json.Number(v.MarshalTo(nil))
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	}
	return nil
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

// wantRequest is what Parse should return for the JSON object body, worked
// out from the fake's reader (Python's json.loads) and SGLang's rules. got
// is what Parse returned: a DP rank written as a string is taken from it,
// as TestParseDPRanks checks pydantic's reading of those.
func wantRequest(t *testing.T, body []byte, got Request) Request {
	t.Helper()
	m := pyObject(t, body)
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
	for _, name := range []string{"bootstrap_host", "bootstrap_port", "bootstrap_room", "do_local_prefill"} {
		if _, ok := m[name]; ok {
			r.HasKVFields = true
		}
	}
	if rid, ok := m["rid"]; ok {
		// The span is the value the workers read: wrapped as an object,
		// it decodes to the same.
		wrapped := pyObject(t, append(append([]byte(`{"rid":`), got.RID.Of(body)...), '}'))
		if got.RID.Len == 0 || !reflect.DeepEqual(wrapped["rid"], rid) {
			t.Fatalf("Parse(%q): rid at %+v is %q; want the value %v", body, got.RID, got.RID.Of(body), rid)
		}
		r.RID = got.RID
	}
	r.RoutingKey = wantRoutingKey(t, body, m, got.RoutingKey)
	r.PrefillDPRank = wantRank(m["disagg_prefill_dp_rank"], got.PrefillDPRank)
	if v, ok := m["routed_dp_rank"]; ok && v != nil {
		r.RoutedDPRank = wantRank(v, got.RoutedDPRank)
	} else {
		r.RoutedDPRank = wantRank(m["data_parallel_rank"], got.RoutedDPRank)
	}
	return r
}

// wantRoutingKey is got, the routing key Parse found in body (decoded as m),
// if it holds the prompt a worker reads first (see routingkey.go), else
// fails t; the empty span when there is none.
func wantRoutingKey(t *testing.T, body []byte, m map[string]any, got Span) Span {
	t.Helper()
	var want any
	for _, name := range []string{"text", "input_ids", "prompt", "messages"} {
		if v, ok := m[name]; ok && v != nil {
			want = v
			break
		}
	}
	if list, ok := want.([]any); ok && len(list) > 0 {
		switch list[0].(type) {
		case string, []any:
			want = list[0]
		}
	}
	raw := got.Of(body)
	switch want := want.(type) {
	case string:
		wrapped := pyObject(t, []byte(`{"k":"`+string(raw)+`"}`))
		if wrapped["k"] != want {
			t.Fatalf("Parse(%q): routing key %q; want the text %q", body, raw, want)
		}
		return got
	case []any:
		if len(want) > 0 {
			wrapped := pyObject(t, append(append([]byte(`{"k":`), raw...), '}'))
			if !reflect.DeepEqual(wrapped["k"], want) {
				t.Fatalf("Parse(%q): routing key %q; want the list %v", body, raw, want)
			}
			return got
		}
	}
	return Span{}
}

// wantRank is a decoded DP-rank value as pydantic reads an Optional[int],
// for the values Parse accepts (it refuses the others); a string is taken
// as got.
func wantRank(v any, got DPRank) DPRank {
	switch v := v.(type) {
	case bool:
		if v {
			return DPRank{Set: true, Rank: 1}
		}
		return DPRank{Set: true}
	case string:
		return got
	case json.Number:
		if f, err := strconv.ParseFloat(string(v), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1e9 {
			return DPRank{Set: true, Rank: int(f)}
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
