package bootstrap

import (
	"math"
	"strings"
	"testing"
)

// Typical bodies of the three generate routes.
const (
	chatBody = `{"model":"Qwen/Qwen3-8B","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"Write a haiku about load balancers and KV caches, please."}],` +
		`"max_tokens":128,"temperature":0.7,"top_p":0.95,"stream":true,"stream_options":{"include_usage":true}}`
	generateBody = `{"text":"The capital of France is","sampling_params":{"max_new_tokens":32,"temperature":0,` +
		`"stop":["\n"]},"return_logprob":true,"logprob_start_len":0,"stream":false,"rid":"a3f1c2"}`
	batchBody = `{"text":["Hello","World","Foo"],"sampling_params":{"max_new_tokens":8}}`
)

// checkAppend checks that Append gives want for body and fields.
func checkAppend(t *testing.T, body string, fields Fields, want string) {
	t.Helper()
	got, err := Append(nil, []byte(body), fields)
	if err != nil {
		t.Fatalf("Append(%q): unexpected error: %s", body, err)
	}
	if string(got) != want {
		t.Fatalf("Append(%q):\ngot  %q;\nwant %q", body, got, want)
	}
}

func TestAppend(t *testing.T) {
	f := func(body string, fields Fields, want string) {
		t.Helper()
		checkAppend(t, body, fields, want)
	}
	one := Fields{Host: "10.0.0.5", Port: 8998, Rooms: []uint64{42}}
	const add = `"bootstrap_host":"10.0.0.5","bootstrap_port":8998,"bootstrap_room":42`

	f(`{}`, one, `{`+add+`}`)
	f(`{"a":1}`, one, `{"a":1,`+add+`}`)
	f(chatBody, one, chatBody[:len(chatBody)-1]+`,`+add+`}`)
	f(generateBody, one, generateBody[:len(generateBody)-1]+`,`+add+`}`)
	f(`{"text":"hi"}`, one, `{"text":"hi",`+add+`}`)
	f(`{"input_ids":[1,2,3]}`, one, `{"input_ids":[1,2,3],`+add+`}`)

	// The client's bootstrap members go, each with exactly one comma.
	f(`{"bootstrap_room":7,"a":1}`, one, `{"a":1,`+add+`}`)
	f(`{"a":1,"bootstrap_host":"x","b":2}`, one, `{"a":1,"b":2,`+add+`}`)
	f(`{"a":1,"bootstrap_port":1}`, one, `{"a":1,`+add+`}`)
	f(`{"bootstrap_room":7}`, one, `{`+add+`}`)
	f(`{"bootstrap_room":7,"bootstrap_host":"h","bootstrap_port":1}`, one, `{`+add+`}`)
	f(`{"bootstrap_room":1,"a":1,"bootstrap_room":2,"bootstrap_host":"h","b":[],"bootstrap_port":null}`,
		one, `{"a":1,"b":[],`+add+`}`)
	f(`{"bootstrap_room":[1,{"x":"}"}],"a":{"bootstrap_room":3}}`, one, `{"a":{"bootstrap_room":3},`+add+`}`)

	// Nested members of the same names are the client's business.
	f(`{"sampling_params":{"bootstrap_room":5},"a":[{"bootstrap_host":"x"}]}`, one,
		`{"sampling_params":{"bootstrap_room":5},"a":[{"bootstrap_host":"x"}],`+add+`}`)

	// Whitespace stays where it was; the new members follow the last kept one.
	f(`{ }`, one, `{ `+add+`}`)
	f(" \n{\n}\n ", one, " \n{\n"+add+"}\n ")
	f(`{ "a" : 1 }`, one, `{ "a" : 1,`+add+` }`)
	f(`{ "bootstrap_room" : 1 , "a" : 1 , "bootstrap_port" : 2 , "b" : 2 }`, one, `{ "a" : 1 , "b" : 2,`+add+` }`)
	f("{\n  \"a\": 1,\n  \"bootstrap_host\": \"x\"\n}\n", one, "{\n  \"a\": 1,"+add+"\n}\n")
	f("{\t\"bootstrap_host\":\"x\"\r\n,\t\"a\":1}", one, "{\t\"a\":1,"+add+"}")

	// Numbers, escapes and unicode are copied, not re-encoded.
	f(`{"a":1e400,"b":-0.0,"c":12345678901234567890123,"d":1.50,"e":1E+2}`, one,
		`{"a":1e400,"b":-0.0,"c":12345678901234567890123,"d":1.50,"e":1E+2,`+add+`}`)
	f(`{"a":"caf\u00e9 ☕ \ud83d\ude00","b":"\"bootstrap_room\":1","c\"d":"\\","e":"\/"}`, one,
		`{"a":"caf\u00e9 ☕ \ud83d\ude00","b":"\"bootstrap_room\":1","c\"d":"\\","e":"\/",`+add+`}`)

	// Keys compare as the worker's json.loads decodes them (issue 19): a
	// client's field goes under any spelling, every duplicate with it.
	f(`{"bootstrap\u005froom":1}`, one, `{`+add+`}`)
	f(`{"a":1,"bootstrap\u005fhost":"evil","b":2}`, one, `{"a":1,"b":2,`+add+`}`)
	f(`{"\u0062\u006f\u006f\u0074\u0073\u0074\u0072\u0061\u0070\u005f\u0070\u006f\u0072\u0074":1}`, one, `{`+add+`}`)
	f(`{"bootstrap\u005Froom":1,"bootstrap_room":2,"bootstr\u0061p_room":4,"a":0}`, one, `{"a":0,`+add+`}`)
	// Keys that decode to other names stay.
	f(`{"bootstrap_room\u0000":1,"bootstrap\u00e9room":2,"bootstrap\nroom":3,"bootstrap_roo":4,"bootstrap\/room":5}`, one,
		`{"bootstrap_room\u0000":1,"bootstrap\u00e9room":2,"bootstrap\nroom":3,"bootstrap_roo":4,"bootstrap\/room":5,`+add+`}`)
	// A client's do_local_prefill would have the decode prefill by itself
	// while the prefill waits for it in vain: pdlb decides that alone.
	f(`{"do_local_prefill":true,"a":1,"do\u005flocal_prefill":1}`, one, `{"a":1,`+add+`}`)

	// Ports and hosts.
	f(`{}`, Fields{Host: "h", Port: 0, Rooms: []uint64{1}}, `{"bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":1}`)
	f(`{}`, Fields{Host: "h", Port: -1, Rooms: []uint64{1}}, `{"bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":1}`)
	f(`{}`, Fields{Host: Host("FE80::1"), Port: 8998, Rooms: []uint64{MaxRoom}},
		`{"bootstrap_host":"[fe80::1]","bootstrap_port":8998,"bootstrap_room":9223372036854775807}`)
	f(`{}`, Fields{Host: "a\"b\\c\x01\n\xffé", Port: 65535, Rooms: []uint64{0}},
		`{"bootstrap_host":"a\"b\\c\u0001\u000a\ufffdé","bootstrap_port":65535,"bootstrap_room":0}`)

	// Batches write lists.
	two := Fields{Host: "h", Port: 8998, Rooms: []uint64{1, 2}, Batch: true}
	const addTwo = `"bootstrap_host":["h","h"],"bootstrap_port":[8998,8998],"bootstrap_room":[1,2]`
	f(`{"text":["a","b"]}`, two, `{"text":["a","b"],`+addTwo+`}`)
	f(`{"input_ids":[[1,2],[3]],"bootstrap_room":[5,6]}`, two, `{"input_ids":[[1,2],[3]],`+addTwo+`}`)
	f(`{"text":[]}`, Fields{Host: "h", Port: 1, Batch: true},
		`{"text":[],"bootstrap_host":[],"bootstrap_port":[],"bootstrap_room":[]}`)
	f(`{"text":["a"]}`, Fields{Host: "h", Rooms: []uint64{9}, Batch: true},
		`{"text":["a"],"bootstrap_host":["h"],"bootstrap_port":[null],"bootstrap_room":[9]}`)
	f(batchBody, Fields{Host: "h", Port: 1, Rooms: []uint64{1, 2, 3}, Batch: true},
		batchBody[:len(batchBody)-1]+`,"bootstrap_host":["h","h","h"],"bootstrap_port":[1,1,1],"bootstrap_room":[1,2,3]}`)
}

func TestAppendError(t *testing.T) {
	f := func(body string, fields Fields, wantMsg string) {
		t.Helper()
		dst := []byte("prefix")
		got, err := Append(dst, []byte(body), fields)
		if err == nil {
			t.Fatalf("Append(%q): expecting an error; got %q", body, got)
		}
		if !strings.HasPrefix(err.Error(), "cannot append bootstrap fields: ") || !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("Append(%q): got error %q; want one containing %q", body, err, wantMsg)
		}
		if string(got) != "prefix" {
			t.Fatalf("Append(%q) on error: got dst %q; want %q", body, got, "prefix")
		}
	}
	one := Fields{Host: "h", Port: 1, Rooms: []uint64{1}}

	f(``, one, "unexpected end of body")
	f(`  `, one, "unexpected end of body")
	f(`abc`, one, "body is a JSON number, not an object")
	f(`[{"a":1}]`, one, "body is a JSON array, not an object")
	f(`"{}"`, one, "body is a JSON string, not an object")
	f(`{`, one, "unexpected end of body")
	f(`{"a":1`, one, "unexpected end of body")
	f(`{"a":"x}`, one, "unterminated string")
	f(`{"a\":1}`, one, "unterminated string")
	f(`{"a":[1}`, one, "mismatched")
	f(`{"a":[[1]}`, one, "mismatched")
	f(`{"a":[[1]`, one, "unexpected end of body")
	f(`{"a":1]}`, one, "expected ',' or '}'")
	f(`{"a":1}}`, one, "unexpected data after the object")
	f(`{"a":1} x`, one, "unexpected data after the object")
	f(`{"a" 1}`, one, "expected ':'")
	f(`{"a":,"b":1}`, one, "unexpected ','")
	f(`{,}`, one, "expected a key")
	f(`{"a":1,}`, one, "expected a key")
	f(`{"a":`+strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth)+`}`, one, "nest more than 1024")

	// Fields that do not fit the body are the caller's bug.
	f(`{}`, Fields{Host: "h"}, "a scalar body takes exactly one room, got 0")
	f(`{}`, Fields{Host: "h", Rooms: []uint64{1, 2}}, "a scalar body takes exactly one room, got 2")
	f(`{}`, Fields{Host: "h", Rooms: []uint64{1 << 63}}, "room 9223372036854775808 is above the largest room")
	f(`{"text":["a","b"]}`, Fields{Host: "h", Rooms: []uint64{1}, Batch: true}, "1 rooms do not fit a body whose batch size is 2")
	f(`{"text":"a"}`, Fields{Host: "h", Rooms: []uint64{1}, Batch: true}, "batch size is -1")
	f(`{"input_ids":[1,2]}`, Fields{Host: "h", Rooms: []uint64{1, 2}, Batch: true}, "batch size is -1")
	f(`{}`, Fields{Host: "h", Batch: true}, "0 rooms do not fit a body whose batch size is -1")
	f(`{"text":[1 2]}`, Fields{Host: "h", Rooms: []uint64{1}, Batch: true}, "expected ',' or ']'")
}

// TestAppendDecodes checks Append and Strip on every seed body, on each of
// pdlb's paths, against what a worker reads (checkSent).
func TestAppendDecodes(t *testing.T) {
	f := func(body string, fields *Fields) {
		t.Helper()
		var out []byte
		var err error
		if fields == nil {
			out, err = Strip(nil, []byte(body))
		} else {
			out, err = Append(nil, []byte(body), *fields)
		}
		if err != nil {
			t.Fatalf("Append(%q): unexpected error: %s", body, err)
		}
		checkSent(t, []byte(body), out, fields)
	}
	hosts := []string{"10.0.0.5", "[fe80::1]", "prefill-0.svc", "", "q\"\\\x00\xff☕"}
	for i, body := range seedBodies {
		r, err := Parse([]byte(body))
		if err != nil {
			continue
		}
		fields := Fields{Host: hosts[i%len(hosts)], Port: i % 3 * 8998, Rooms: []uint64{uint64(i) * 1e17}}
		f(body, &fields)
		ranked := fields
		ranked.PrefillDPRank, ranked.RoutedDPRank = DPRank{Set: true, Rank: i % 4}, DPRank{Set: true, Rank: i % 3}
		f(body, &ranked)
		f(body, &Fields{LocalPrefill: true})
		f(body, nil)
		if r.Batch >= 0 {
			fields.Batch = true
			fields.Rooms = make([]uint64, r.Batch)
			for j := range fields.Rooms {
				fields.Rooms[j] = MaxRoom - uint64(j)
			}
			f(body, &fields)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	f := func(body string, fields Fields) {
		t.Helper()
		b := []byte(body)
		dst := make([]byte, 0, 2*len(b)+256)
		n := testing.AllocsPerRun(100, func() {
			var err error
			if dst, err = Append(dst[:0], b, fields); err != nil {
				t.Fatalf("Append(%q): unexpected error: %s", body, err)
			}
		})
		if n != 0 {
			t.Fatalf("Append(%q): got %v allocs; want 0", body, n)
		}
	}
	f(chatBody, Fields{Host: "10.0.0.5", Port: 8998, Rooms: []uint64{NewRoom()}})
	f(generateBody, Fields{Host: "[fe80::1]", Rooms: []uint64{NewRoom()}})
	f(batchBody, Fields{Host: "h", Port: 1, Rooms: []uint64{1, 2, 3}, Batch: true})
	f(`{"bootstrap_room":1,"a":"caf\u00e9","bootstrap_host":"x"}`, Fields{Host: "h\"é", Rooms: []uint64{1}})
	f(`{"bootstrap\u005froom":1,"str\u0065am":true,"do\u005flocal_prefill":1}`, Fields{Host: "h", Rooms: []uint64{1}})
}

func TestAppendDst(t *testing.T) {
	fields := Fields{Host: "h", Port: 1, Rooms: []uint64{2}}
	dst := make([]byte, 3, 1024)
	copy(dst, "abc")
	got, err := Append(dst, []byte(`{"a":1}`), fields)
	if err != nil {
		t.Fatalf("unexpected error: %s", err)
	}
	want := `abc{"a":1,"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":2}`
	if string(got) != want {
		t.Fatalf("got %q; want %q", got, want)
	}
	if &got[0] != &dst[0] {
		t.Fatalf("Append reallocated a dst with enough capacity")
	}
}

func TestHost(t *testing.T) {
	f := func(host, want string) {
		t.Helper()
		if got := Host(host); got != want {
			t.Fatalf("Host(%q): got %q; want %q", host, got, want)
		}
	}
	f("10.0.0.5", "10.0.0.5")
	f("Prefill-0.Svc", "prefill-0.svc")
	f("localhost", "localhost")
	f("FE80::1", "[fe80::1]")
	f("::1", "[::1]")
	f("::ffff:10.0.0.5", "[::ffff:10.0.0.5]")
	f("fe80::1%eth0", "[fe80::1%eth0]")
	f("[::1]", "[::1]")
	f("", "")
}

func TestNewRoom(t *testing.T) {
	var or uint64
	seen := make(map[uint64]bool)
	for range 10000 {
		room := NewRoom()
		if room > MaxRoom {
			t.Fatalf("NewRoom: got %d; want at most %d", room, uint64(MaxRoom))
		}
		if seen[room] {
			t.Fatalf("NewRoom: got %d twice in 10000 draws", room)
		}
		seen[room] = true
		or |= room
	}
	// Every one of the 63 bits is set by some draw unless the generator is
	// broken: each stays clear in 10000 draws with probability 2^-10000.
	if or != MaxRoom {
		t.Fatalf("NewRoom: bits set over 10000 draws: got %#x; want %#x", or, uint64(MaxRoom))
	}
	if n := testing.AllocsPerRun(100, func() { NewRoom() }); n != 0 {
		t.Fatalf("NewRoom: got %v allocs; want 0", n)
	}
}

func TestAlignRoom(t *testing.T) {
	f := func(room uint64, dpSize, dpRank int) {
		t.Helper()
		got := AlignRoom(room, dpSize, dpRank)
		if got > MaxRoom {
			t.Fatalf("AlignRoom(%d, %d, %d): got %d; want at most %d", room, dpSize, dpRank, got, uint64(MaxRoom))
		}
		if got%uint64(dpSize) != uint64(dpRank) {
			t.Fatalf("AlignRoom(%d, %d, %d): got %d, which is %d mod %d; want %d",
				room, dpSize, dpRank, got, got%uint64(dpSize), dpSize, dpRank)
		}
		// Only the low bits may change: the room moves by less than two blocks.
		diff := max(got, room&MaxRoom) - min(got, room&MaxRoom)
		if diff >= 2*uint64(dpSize) {
			t.Fatalf("AlignRoom(%d, %d, %d): got %d, %d away; want less than %d", room, dpSize, dpRank, got, diff, 2*uint64(dpSize))
		}
	}
	rooms := []uint64{0, 1, 7, 8, MaxRoom, MaxRoom - 1, MaxRoom - 7, MaxRoom - 8, 1 << 63, math.MaxUint64}
	for range 1000 {
		rooms = append(rooms, NewRoom(), MaxRoom-NewRoom()%64)
	}
	for _, dpSize := range []int{2, 3, 4, 7, 8, 16, 1000, 1 << 40, MaxRoom} {
		for _, room := range rooms {
			f(room, dpSize, 0)
			f(room, dpSize, dpSize-1)
			f(room, dpSize, dpSize/2)
		}
	}

	for _, dpSize := range []int{-1, 0, 1} {
		for _, room := range []uint64{0, 5, MaxRoom, math.MaxUint64} {
			if got := AlignRoom(room, dpSize, 0); got != room {
				t.Fatalf("AlignRoom(%d, %d, 0): got %d; want the room unchanged", room, dpSize, got)
			}
		}
	}
}

func TestAlignRoomPanics(t *testing.T) {
	f := func(dpSize, dpRank int) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("AlignRoom(1, %d, %d): expecting a panic", dpSize, dpRank)
			}
		}()
		AlignRoom(1, dpSize, dpRank)
	}
	f(4, 4)
	f(4, -1)
	f(2, 100)
}

func TestAppendDPRanks(t *testing.T) {
	f := func(body string, fields Fields, want string) {
		t.Helper()
		checkAppend(t, body, fields, want)
	}
	const add = `"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":4`
	base := Fields{Host: "h", Port: 1, Rooms: []uint64{4}}
	prefill := base
	prefill.PrefillDPRank = DPRank{Set: true, Rank: 0}
	prefill.RoutedDPRank = DPRank{Set: true, Rank: 0}
	decode := base
	decode.PrefillDPRank = DPRank{Set: true, Rank: 0}

	// Unset ranks leave the client's members alone.
	f(`{"routed_dp_rank":1,"disagg_prefill_dp_rank":2}`, base, `{"routed_dp_rank":1,"disagg_prefill_dp_rank":2,`+add+`}`)
	// The prefill's body: both ranks replaced, the deprecated alias dropped.
	f(`{"routed_dp_rank":1,"data_parallel_rank":1,"text":"a","disagg_prefill_dp_rank":2}`, prefill,
		`{"text":"a",`+add+`,"disagg_prefill_dp_rank":0,"routed_dp_rank":0}`)
	// The decode's body keeps its own routed_dp_rank.
	f(`{"routed_dp_rank":1,"text":"a"}`, decode, `{"routed_dp_rank":1,"text":"a",`+add+`,"disagg_prefill_dp_rank":0}`)
	// Nested members of those names are not touched.
	f(`{"x":{"routed_dp_rank":1}}`, prefill, `{"x":{"routed_dp_rank":1},`+add+`,"disagg_prefill_dp_rank":0,"routed_dp_rank":0}`)
	// Replaced under any spelling, as the worker decodes keys (issue 19).
	f(`{"disagg\u005fprefill\u005fdp\u005frank":2,"routed\u005fdp_rank":1,"data_parallel\u005frank":1,"text":"a"}`, prefill,
		`{"text":"a",`+add+`,"disagg_prefill_dp_rank":0,"routed_dp_rank":0}`)
	f(`{"routed\u005fdp_rank":1,"disagg\u005fprefill\u005fdp\u005frank":2}`, decode, `{"routed\u005fdp_rank":1,`+add+`,"disagg_prefill_dp_rank":0}`)
}

func TestAppendLocalPrefill(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		got, err := Append(nil, []byte(body), Fields{LocalPrefill: true, Batch: true})
		if err != nil {
			t.Fatalf("Append(%q): unexpected error: %s", body, err)
		}
		if string(got) != want {
			t.Fatalf("Append(%q):\ngot  %s\nwant %s", body, got, want)
		}
	}
	f(`{}`, `{"do_local_prefill":true}`)
	f(`{"text": "a"}`, `{"text": "a","do_local_prefill":true}`)
	// No bootstrap field may reach the decode, and the flag appears once.
	f(`{"bootstrap_room": 1, "text": ["a", "b"], "do_local_prefill": false, "bootstrap_host": "h"}`,
		`{"text": ["a", "b"],"do_local_prefill":true}`)
	// Under any spelling (issue 19): an escaped bootstrap_host once reached
	// a decode on this path and pointed its KV handshake at the client's
	// address.
	f(`{"bootstrap\u005fhost": "evil", "text": "a", "bootstrap\u005fport": 1, "\u0062ootstrap_room": 7, "do\u005flocal\u005fprefill": false}`,
		`{"text": "a","do_local_prefill":true}`)
}

func TestStrip(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		got, err := Strip([]byte("dst"), []byte(body))
		if err != nil {
			t.Fatalf("Strip(%q): unexpected error: %s", body, err)
		}
		if string(got) != "dst"+want {
			t.Fatalf("Strip(%q):\ngot  %q\nwant %q", body, got, "dst"+want)
		}
	}
	f(`{}`, `{}`)
	f(`{"text": "a", "x": 1.50}`, `{"text": "a", "x": 1.50}`)
	f(`{"bootstrap_room": 1}`, `{}`)
	f(`{ "a" : 1 , "bootstrap_port" : 2 }`, `{ "a" : 1 }`)
	f(`{"bootstrap_host": "h", "a": 1, "bootstrap_room": 2, "b": 2, "do_local_prefill": true}`, `{"a": 1, "b": 2}`)
	// Under any spelling, every duplicate.
	f(`{"bootstrap\u005fhost": "evil", "text": "a", "bootstrap\u005Fport": 1, "\u0062ootstrap_room": 7, "bootstrap_room": 8, "do\u005flocal\u005fprefill": true}`,
		`{"text": "a"}`)
	// The DP ranks, nested members and other names are the client's.
	f(`{"routed_dp_rank": 1, "disagg_prefill_dp_rank": 0, "sampling_params": {"bootstrap_room": 5}, "bootstrap\/room": 1}`,
		`{"routed_dp_rank": 1, "disagg_prefill_dp_rank": 0, "sampling_params": {"bootstrap_room": 5}, "bootstrap\/room": 1}`)

	got, err := Strip([]byte("dst"), []byte(`{"bootstrap_room": 1`))
	if err == nil || string(got) != "dst" || !strings.HasPrefix(err.Error(), "cannot strip bootstrap fields: ") {
		t.Fatalf("Strip of a truncated body: got %q, %v; want dst unchanged and an error", got, err)
	}
	body := []byte(`{"bootstrap\u005fhost": "evil", "text": "a"}`)
	dst := make([]byte, 0, len(body))
	if n := testing.AllocsPerRun(100, func() { dst, _ = Strip(dst[:0], body) }); n != 0 {
		t.Fatalf("Strip: got %v allocs; want 0", n)
	}
}
