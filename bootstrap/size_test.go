package bootstrap

import (
	"strings"
	"testing"
)

// TestMaxAddedBoundsAppend checks the bound lb reserves memory by: Append
// never writes more than MaxAdded beyond the body, for every seed body and
// every shape of fields, hosts that need escaping and batches included.
func TestMaxAddedBoundsAppend(t *testing.T) {
	f := func(body string, fields Fields) {
		t.Helper()
		out, err := Append(nil, []byte(body), fields)
		if err != nil {
			return // a body Append refuses holds no memory
		}
		items := -1
		if fields.Batch {
			items = len(fields.Rooms)
		}
		if added, most := len(out)-len(body), MaxAdded(fields.Host, items); added > most {
			t.Fatalf("Append(%q, %+v) added %d bytes; MaxAdded says at most %d", body, fields, added, most)
		}
	}
	hosts := []string{"", "10.0.0.5", "[fd00::1]", "a\"\\\x00\xff\u00e9", strings.Repeat("\x01", 40)}
	for _, body := range seedBodies {
		for _, host := range hosts {
			dp := DPRank{Set: true, Rank: -1 << 63}
			f(body, Fields{Host: host, Port: 65535, Rooms: []uint64{MaxRoom}})
			f(body, Fields{Host: host, Rooms: []uint64{MaxRoom}, PrefillDPRank: dp, RoutedDPRank: dp})
			f(body, Fields{LocalPrefill: true, PrefillDPRank: dp, RoutedDPRank: dp})
			r, err := Parse([]byte(body))
			if err != nil || r.Batch < 0 {
				continue
			}
			rooms := make([]uint64, r.Batch)
			for i := range rooms {
				rooms[i] = MaxRoom
			}
			f(body, Fields{Host: host, Port: 65535, Rooms: rooms, Batch: true, PrefillDPRank: dp, RoutedDPRank: dp})
		}
	}
	// A batch whose items are nothing: the expansion lb must budget for.
	items := strings.Repeat("[],", 9999) + "[]"
	rooms := make([]uint64, 10000)
	f(`{"input_ids":[`+items+`]}`, Fields{Host: "prefill-0.example", Port: 8998, Rooms: rooms, Batch: true})
}

// TestMaxAddedIsTight keeps the bound from growing loose: a budget
// reserved by it should be near what Append writes.
func TestMaxAddedIsTight(t *testing.T) {
	body := `{"input_ids":[` + strings.Repeat("[],", 999) + `[]]}`
	rooms := make([]uint64, 1000)
	for i := range rooms {
		rooms[i] = MaxRoom
	}
	fields := Fields{Host: "10.0.0.5", Port: 8998, Rooms: rooms, Batch: true}
	out, err := Append(nil, []byte(body), fields)
	if err != nil {
		t.Fatal(err)
	}
	if added, most := len(out)-len(body), MaxAdded(fields.Host, len(rooms)); most > added+added/5 {
		t.Fatalf("MaxAdded is %d for %d bytes added: more than 20%% above", most, added)
	}
}
