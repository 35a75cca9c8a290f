package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// maxDepth bounds how deeply containers may nest, counting the body's own
// object. It sits near where Python's json gives up with RecursionError, so
// no body a worker would accept is refused, and the walkers here keep their
// place in a fixed bit stack of this many levels (levels).
const maxDepth = 1024

var (
	errTooDeep       = fmt.Errorf("containers nest more than %d levels deep", maxDepth)
	errUnexpectedEnd = errors.New("unexpected end of body")
)

// member is one top-level member of an object: slices of the body and
// offsets into it.
type member struct {
	key   []byte // raw key between its quotes; escapes are left as they are
	value []byte // raw value
	start int    // offset of the key's opening quote
	end   int    // offset just past the value
	// escaped is true when key holds an escape: only then may key differ
	// from the key a worker's json.loads decodes (see escapedField).
	escaped bool
}

// members walks the top-level members of a JSON object in place without
// allocating. It checks the structure of the object and the nesting of every
// value, but not the spelling of scalars: Parse validates those separately.
type members struct {
	b     []byte
	i     int // next byte to read
	n     int // members returned so far
	close int // offset of the closing brace, once next has reported the end
}

// newMembers starts walking the object in b, which may be surrounded by
// whitespace.
func newMembers(b []byte) (members, error) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return members{}, errUnexpectedEnd
	}
	if b[i] != '{' {
		return members{}, fmt.Errorf("body is a JSON %s, not an object", kindOf(b[i]))
	}
	return members{b: b, i: i + 1, close: -1}, nil
}

// next returns the next member, or false once the closing brace has been
// read and only whitespace follows it.
func (ms *members) next() (member, bool, error) {
	b := ms.b
	i := skipSpace(b, ms.i)
	if i == len(b) {
		return member{}, false, errUnexpectedEnd
	}
	if b[i] == '}' {
		if j := skipSpace(b, i+1); j != len(b) {
			return member{}, false, fmt.Errorf("unexpected data after the object at offset %d", j)
		}
		ms.i, ms.close = i, i
		return member{}, false, nil
	}
	if ms.n > 0 {
		if b[i] != ',' {
			return member{}, false, fmt.Errorf("expected ',' or '}' at offset %d", i)
		}
		i = skipSpace(b, i+1)
	}
	if i == len(b) || b[i] != '"' {
		return member{}, false, fmt.Errorf("expected a key at offset %d", i)
	}
	k, escaped, err := skipKey(b, i)
	if err != nil {
		return member{}, false, err
	}
	j := skipSpace(b, k)
	if j == len(b) || b[j] != ':' {
		return member{}, false, fmt.Errorf("expected ':' at offset %d", j)
	}
	v := skipSpace(b, j+1)
	e, err := skipValue(b, v, maxDepth-1)
	if err != nil {
		return member{}, false, err
	}
	ms.i = e
	ms.n++
	return member{key: b[i+1 : k-1], value: b[v:e], start: i, end: e, escaped: escaped}, true, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// skipKey is skipString for a key, which also reports whether the key holds
// an escape. Keys are short: one byte loop finds both, and the common key,
// without escapes, is then compared as it is, at no further cost.
func skipKey(b []byte, i int) (end int, escaped bool, err error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, escaped, nil
		case '\\':
			escaped = true
			j++ // the escaped byte, which may be a quote
		}
	}
	return 0, false, unterminated(i)
}

// unterminated is the error for a string whose opening quote is at offset i
// and whose closing one is missing.
func unterminated(i int) error {
	return fmt.Errorf("unterminated string at offset %d", i)
}

// skipString returns the offset just past the string whose opening quote is
// at b[i].
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, unterminated(i)
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for j-1-n > i && b[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return j + 1, nil
		}
		j++
	}
}

// skipValue returns the offset just past the value starting at b[i], whose
// containers may nest at most depth levels. Scalars are only delimited.
func skipValue(b []byte, i, depth int) (int, error) {
	if i == len(b) {
		return 0, errUnexpectedEnd
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipContainer(b, i, depth)
	}
	j := i
	for j < len(b) && isScalarByte(b[j]) {
		j++
	}
	if j == i {
		return 0, unexpected(b, i)
	}
	return j, nil
}

func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
		c == '-' || c == '+' || c == '.'
}

// levels is a bit stack of open containers: whether the one at each depth
// is an object. The walkers here are iterative and keep their place in it.
type levels [maxDepth / 64]uint64

// open records the container opened at depth d, an object or an array.
func (l *levels) open(d int, object bool) {
	bit := uint64(1) << (d % 64)
	if object {
		l[d/64] |= bit
	} else {
		l[d/64] &^= bit
	}
}

// object reports whether the container open at depth d is an object.
func (l *levels) object(d int) bool { return l[d/64]&(uint64(1)<<(d%64)) != 0 }

// skipContainer is skipValue for an object or array. It walks iteratively,
// remembering which levels are objects so that every closing bracket can
// be matched to its opener.
func skipContainer(b []byte, i, depth int) (int, error) {
	var open levels
	d := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j, err := skipString(b, i)
			if err != nil {
				return 0, err
			}
			i = j - 1
		case '{', '[':
			if d >= depth {
				return 0, errTooDeep
			}
			open.open(d, c == '{')
			d++
		case '}', ']':
			d--
			if (c == '}') != open.object(d) {
				return 0, fmt.Errorf("mismatched %q at offset %d", c, i)
			}
			if d == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, errUnexpectedEnd
}

// unexpected is the error for a byte that cannot be where it is, b[i].
// A byte of a multi-byte character is shown as the byte it is ('\xef').
func unexpected(b []byte, i int) error {
	c := b[i]
	if c >= 0x80 {
		return fmt.Errorf("unexpected '\\x%02x' at offset %d", c, i)
	}
	return fmt.Errorf("unexpected %q at offset %d", c, i)
}

// kindOf names the JSON type of a value by its first byte, for errors.
func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// listLen returns the number of items in the list v, which starts with '[',
// and whether its first item is itself a list.
func listLen(v []byte) (n int, nested bool, err error) {
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return 0, false, nil
	}
	nested = i < len(v) && v[i] == '['
	for {
		e, err := skipValue(v, i, maxDepth)
		if err != nil {
			return 0, false, err
		}
		n++
		i = skipSpace(v, e)
		if i == len(v) {
			return 0, false, errUnexpectedEnd
		}
		switch v[i] {
		case ']':
			return n, nested, nil
		case ',':
			i = skipSpace(v, i+1)
		default:
			return 0, false, fmt.Errorf("expected ',' or ']' in list at offset %d", i)
		}
	}
}

// truthy reports whether Python's bool() is true for the value v.
func truthy(v []byte) bool {
	switch v[0] {
	case 't', 'N', 'I': // true, NaN, Infinity
		return true
	case 'f', 'n':
		return false
	case '"':
		return len(v) > 2
	case '[', '{':
		return skipSpace(v, 1) < len(v)-1
	}
	if len(v) > 1 && v[1] == 'I' { // -Infinity
		return true
	}
	if bytes.IndexAny(v, ".eE") < 0 {
		// A Python int is zero only when every digit is.
		return bytes.IndexAny(v, "123456789") >= 0
	}
	// A Python float may underflow to 0.0 (1e-400) or overflow to inf. This
	// allocates, but "stream": 1.5 is not a body worth optimising for.
	f, _ := strconv.ParseFloat(string(v), 64)
	return f != 0
}
