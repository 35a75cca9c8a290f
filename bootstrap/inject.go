package bootstrap

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxRoom is the largest bootstrap room: SGLang takes rooms from [0, 2^63-1].
const MaxRoom = 1<<63 - 1

// Fields are the bootstrap fields pdlb writes into a body bound for a
// prefill/decode pair. Append only reads them; Rooms may be reused once
// Append returns.
type Fields struct {
	// Host is bootstrap_host, already formatted by Host.
	Host string
	// Port is bootstrap_port. Zero or less writes null, as mini_lb does when
	// no port was given: each worker then uses its own bootstrap port.
	Port int
	// Rooms are the bootstrap rooms, each at most MaxRoom: exactly one for a
	// scalar body, one per item when Batch is set.
	Rooms []uint64
	// Batch writes all three fields as lists of len(Rooms) items: host and
	// port repeated, rooms as given. The body must then be a batch of
	// exactly len(Rooms) items, as Parse counts them.
	Batch bool

	// PrefillDPRank, when set, replaces disagg_prefill_dp_rank: the prefill
	// DP rank that holds the KV cache (see the package documentation, DP
	// ranks).
	PrefillDPRank DPRank
	// RoutedDPRank, when set, replaces routed_dp_rank and drops its
	// deprecated alias data_parallel_rank: the DP rank of the worker that
	// receives the body.
	RoutedDPRank DPRank

	// LocalPrefill makes a body for a decode that prefills the request
	// itself (SGLang PR #34773): instead of the bootstrap fields, which it
	// removes, Append writes "do_local_prefill": true. Host, Port, Rooms
	// and Batch are then ignored.
	LocalPrefill bool
}

// DPRank is an optional data-parallel rank. The zero value is "not given".
type DPRank struct {
	Set  bool
	Rank int
}

// Append appends body to dst with bootstrap_host, bootstrap_port and
// bootstrap_room set from f, and returns the extended slice. It allocates
// only when dst lacks capacity, and keeps neither dst nor body.
//
// Every top-level member that names a field pdlb owns is dropped, together
// with the one comma (and the whitespace beside it) that separated it from a
// neighbour: the three bootstrap fields and do_local_prefill always, the
// DP-rank fields when f sets them. Keys are compared as the workers'
// json.loads decodes them, so "bootstrap\u005fhost" goes too, and every
// duplicate goes: the fields pdlb writes are then the only ones a worker
// sees, under any spelling. They are written right after the last remaining
// member, before any whitespace that precedes the closing brace. Nested
// members of those names are left alone. Every other byte of body is copied
// as it is: number spellings, escapes, whitespace and member order reach
// the workers unchanged.
//
// Append checks the structure of the object but not its scalars: validate
// untrusted bodies with Parse first. It fails, returning dst at its original
// length, when body is not a well-formed object nested at most as deeply as
// Parse allows, or when f does not fit it.
func Append(dst, body []byte, f Fields) ([]byte, error) {
	if f.LocalPrefill {
		f.Batch = false
	}
	if err := f.check(); err != nil {
		return dst, fmt.Errorf("cannot append bootstrap fields: %w", err)
	}
	n := len(dst)
	dst, rest, kept, err := appendOthers(dst, body, f)
	if err != nil {
		return dst[:n], fmt.Errorf("cannot append bootstrap fields: %w", err)
	}
	if kept {
		dst = append(dst, ',')
	}
	dst = f.appendTo(dst)
	return append(dst, body[rest:]...), nil
}

// Strip appends body to dst without the members that steer a KV transfer,
// bootstrap_host, bootstrap_port, bootstrap_room and do_local_prefill,
// compared and dropped as Append does, and returns the extended slice. It is
// for a body that goes to a worker outside PD, which pdlb gives no room: the
// client must not choose one for it either. Every other byte is copied as it
// is. It allocates only when dst lacks capacity, keeps neither dst nor body,
// and fails as Append does, returning dst at its original length.
func Strip(dst, body []byte) ([]byte, error) {
	n := len(dst)
	dst, rest, _, err := appendOthers(dst, body, Fields{})
	if err != nil {
		return dst[:n], fmt.Errorf("cannot strip bootstrap fields: %w", err)
	}
	return append(dst, body[rest:]...), nil
}

func (f *Fields) check() error {
	if f.LocalPrefill {
		return nil
	}
	if !f.Batch && len(f.Rooms) != 1 {
		return fmt.Errorf("a scalar body takes exactly one room, got %d", len(f.Rooms))
	}
	for _, room := range f.Rooms {
		if room > MaxRoom {
			return fmt.Errorf("room %d is above the largest room %d", room, uint64(MaxRoom))
		}
	}
	return nil
}

// appendOthers appends the body up to where the new fields go, leaving out
// the client's bootstrap members. It returns the offset at which the rest of
// the body resumes, and whether any member was kept (so a comma is needed).
func appendOthers(dst, body []byte, f Fields) ([]byte, int, bool, error) {
	ms, err := newMembers(body)
	if err != nil {
		return dst, 0, false, err
	}
	var text, inputIDs []byte
	prev, kept := -1, false // prev is the end of the previous member
	for {
		m, ok, err := ms.next()
		if err != nil {
			return dst, 0, false, err
		}
		if !ok {
			break
		}
		if prev < 0 {
			dst = append(dst, body[:m.start]...)
		}
		k := fieldNamed(m.key)
		if m.escaped {
			k = escapedField(m.key)
		}
		switch {
		case f.replaces(k):
			// Dropped with the separator before it. A leading member has
			// none, and the next kept member then leaves out its own.
		case kept:
			dst = append(dst, body[prev:m.end]...)
		default:
			dst = append(dst, body[m.start:m.end]...)
			kept = true
		}
		prev = m.end
		if f.Batch {
			switch k {
			case fieldText:
				text = m.value
			case fieldInputIDs:
				inputIDs = m.value
			}
		}
	}
	if prev < 0 {
		dst = append(dst, body[:ms.close]...)
		prev = ms.close
	}
	if f.Batch {
		n, err := batchSize(text, inputIDs)
		if err != nil {
			return dst, 0, false, err
		}
		if n != len(f.Rooms) {
			return dst, 0, false, fmt.Errorf("%d rooms do not fit a body whose batch size is %d", len(f.Rooms), n)
		}
	}
	return dst, prev, kept, nil
}

// replaces reports whether the client's member k must go because pdlb owns
// the field: it writes its own, or, for do_local_prefill, decides alone
// whether a decode prefills (a marked request sent in PD mode would leave its
// prefill holding the KV cache for a decode that never fetches it).
func (f *Fields) replaces(k field) bool {
	switch k {
	case fieldBootstrapHost, fieldBootstrapPort, fieldBootstrapRoom, fieldLocalPrefill:
		return true
	case fieldPrefillDPRank:
		return f.PrefillDPRank.Set
	case fieldRoutedDPRank, fieldDataParallelRank:
		return f.RoutedDPRank.Set
	}
	return false
}

func (f *Fields) appendTo(dst []byte) []byte {
	if f.LocalPrefill {
		dst = append(dst, `"do_local_prefill":true`...)
	} else {
		dst = f.appendBootstrap(dst)
	}
	if f.PrefillDPRank.Set {
		dst = append(dst, `,"disagg_prefill_dp_rank":`...)
		dst = strconv.AppendInt(dst, int64(f.PrefillDPRank.Rank), 10)
	}
	if f.RoutedDPRank.Set {
		dst = append(dst, `,"routed_dp_rank":`...)
		dst = strconv.AppendInt(dst, int64(f.RoutedDPRank.Rank), 10)
	}
	return dst
}

func (f *Fields) appendBootstrap(dst []byte) []byte {
	if !f.Batch {
		dst = append(dst, `"bootstrap_host":`...)
		dst = appendString(dst, f.Host)
		dst = append(dst, `,"bootstrap_port":`...)
		dst = appendPort(dst, f.Port)
		dst = append(dst, `,"bootstrap_room":`...)
		return strconv.AppendUint(dst, f.Rooms[0], 10)
	}
	dst = append(dst, `"bootstrap_host":[`...)
	for i := range f.Rooms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, f.Host)
	}
	dst = append(dst, `],"bootstrap_port":[`...)
	for i := range f.Rooms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendPort(dst, f.Port)
	}
	dst = append(dst, `],"bootstrap_room":[`...)
	for i, room := range f.Rooms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, room, 10)
	}
	return append(dst, ']')
}

func appendPort(dst []byte, port int) []byte {
	if port <= 0 {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(port), 10)
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json writes it, because a worker would refuse the raw bytes.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		} else if c < 0x20 || c == '"' || c == '\\' {
			dst = append(dst, s[start:i]...)
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				dst = append(dst, '\\', c)
			}
		} else {
			i++
			continue
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Host formats the host part of a prefill URL, as url.URL.Hostname returns
// it (no brackets, no port), for Fields.Host: lower-cased, and wrapped in
// brackets when it is an IPv6 literal (mini_lb maybe_wrap_ipv6_address). A
// hostname cannot contain ':', so one that does is taken for IPv6.
func Host(host string) string {
	host = strings.ToLower(host)
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]"
	}
	return host
}

// NewRoom returns a random bootstrap room, uniform in [0, MaxRoom]. It is
// safe for concurrent use and does not allocate.
func NewRoom() uint64 {
	return rand.Uint64() >> 1
}

// AlignRoom returns a room in [0, MaxRoom] congruent to dpRank modulo dpSize,
// keeping the high bits of room, so that a prefill placing requests by
// room % dp_size (follow_bootstrap_room) picks DP rank dpRank. A dpSize of 1
// or less returns room unchanged. dpRank must be in [0, dpSize).
func AlignRoom(room uint64, dpSize, dpRank int) uint64 {
	if dpSize <= 1 {
		return room
	}
	if dpRank < 0 || dpRank >= dpSize {
		panic(fmt.Sprintf("BUG: dpRank=%d out of range [0, %d)", dpRank, dpSize))
	}
	d := uint64(dpSize)
	room &= MaxRoom
	r := room - room%d + uint64(dpRank)
	if r > MaxRoom {
		// The top block of rooms is cut short by MaxRoom: use the one below.
		r -= d
	}
	return r
}
