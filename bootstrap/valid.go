package bootstrap

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// validate checks that b holds one JSON value, optionally surrounded by
// whitespace, with containers nested at most maxDepth levels deep. It
// accepts what encoding/json's Valid accepts, as FuzzValidate checks:
// RFC 8259's grammar, which refuses a raw control character in a string as
// the workers' json.loads does. Neither checks UTF-8. And as json.loads,
// which SGLang's workers and mini_lb read bodies with (and Python clients'
// json.dumps writes float('inf') with), it takes the numbers NaN, Infinity
// and -Infinity.
//
// It walks iteratively, as skipContainer does, and reads strings eight
// bytes at a time (validString).
func validate(b []byte) error {
	var open levels
	d := 0
	i := skipSpace(b, 0)
	var err error
	for {
		// A value starts at b[i].
		if i == len(b) {
			return errUnexpectedEnd
		}
		if c := b[i]; c == '{' || c == '[' {
			if d == maxDepth {
				return errTooDeep
			}
			open.open(d, c == '{')
			d++
			i = skipSpace(b, i+1)
			if i == len(b) || b[i] != c+2 { // '{'+2 is '}', '['+2 is ']'
				if c == '{' {
					if i, err = validKey(b, i); err != nil {
						return err
					}
				}
				continue
			}
			d-- // an empty container, a whole value
			i++
		} else if i, err = validScalar(b, i); err != nil {
			return err
		}
		if i, d, err = validValueEnd(b, i, d, &open); err != nil || d == 0 {
			return err
		}
	}
}

// validScalar returns the offset just past the value starting at b[i],
// which is no container: a string, a literal or a number.
func validScalar(b []byte, i int) (int, error) {
	switch c := b[i]; c {
	case '"':
		return validString(b, i)
	case 't':
		return validLiteral(b, i, "true")
	case 'f':
		return validLiteral(b, i, "false")
	case 'n':
		return validLiteral(b, i, "null")
	case 'N':
		return validLiteral(b, i, "NaN")
	case 'I':
		return validLiteral(b, i, "Infinity")
	default:
		if c != '-' && (c < '0' || c > '9') {
			return 0, unexpected(b, i)
		}
		return validNumber(b, i)
	}
}

// validValueEnd checks what follows a value that ends just before b[i], at
// depth d of the containers open: a comma, a closing bracket or, outside
// every container, the end. It closes the containers that end there and
// returns the offset of the next value and its depth, or a depth of 0 when
// the whole body is checked.
func validValueEnd(b []byte, i, d int, open *levels) (int, int, error) {
	for {
		i = skipSpace(b, i)
		if d == 0 {
			if i != len(b) {
				return 0, 0, fmt.Errorf("unexpected data after the value at offset %d", i)
			}
			return i, 0, nil
		}
		object := open.object(d - 1)
		closing := byte(']')
		if object {
			closing = '}'
		}
		switch {
		case i == len(b):
			return 0, 0, errUnexpectedEnd
		case b[i] == closing:
			d--
			i++
			continue
		case b[i] != ',':
			return 0, 0, fmt.Errorf("expected ',' or %q at offset %d", closing, i)
		}
		i = skipSpace(b, i+1)
		if object {
			var err error
			if i, err = validKey(b, i); err != nil {
				return 0, 0, err
			}
		}
		return i, d, nil
	}
}

// validKey checks an object member's key and colon, the key's quote at
// b[i], and returns the offset of the member's value.
func validKey(b []byte, i int) (int, error) {
	if i == len(b) || b[i] != '"' {
		return 0, fmt.Errorf("expected a key at offset %d", i)
	}
	i, err := validString(b, i)
	if err != nil {
		return 0, err
	}
	i = skipSpace(b, i)
	if i == len(b) || b[i] != ':' {
		return 0, fmt.Errorf("expected ':' at offset %d", i)
	}
	return skipSpace(b, i+1), nil
}

// validString returns the offset just past the string whose opening quote
// is at b[i], checking that it holds only valid escapes and no raw control
// character. It skips eight bytes at a time until one of them needs a look
// (see special): long prompts are most of a large body's bytes.
func validString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		for j+8 <= len(b) {
			if m := special(binary.LittleEndian.Uint64(b[j:])); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		if j == len(b) {
			return 0, fmt.Errorf("unterminated string at offset %d", i)
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			n, err := escapeLen(b, j)
			if err != nil {
				return 0, err
			}
			j += n
		case c < 0x20:
			return 0, fmt.Errorf("a string holds a raw control character at offset %d", j)
		default:
			j++
		}
	}
}

// special marks, in the top bit of each of the eight bytes of x, the bytes
// a string scan must look at: a quote, a backslash or a control character.
// The lowest mark is exact; marks above it may not be (a borrow moves up).
// For a byte v, v-0x01 &^ v has its top bit set when v is 0, and v-0x20 &^ v
// when v is below 0x20; a quote or a backslash is the 0 of x^'"' or x^'\\'.
func special(x uint64) uint64 {
	const ones, spaces, top = 0x0101010101010101, 0x2020202020202020, 0x8080808080808080
	q := x ^ ('"' * ones)
	s := x ^ ('\\' * ones)
	return ((x-spaces)&^x | (q-ones)&^q | (s-ones)&^s) & top
}

// escapeLen returns the length of the escape whose backslash is at b[e].
func escapeLen(b []byte, e int) (int, error) {
	if e+1 < len(b) {
		switch b[e+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			return 2, nil
		case 'u':
			if e+6 <= len(b) {
				if _, ok := hex4(b[e+2 : e+6]); ok {
					return 6, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("invalid escape at offset %d", e)
}

// validNumber returns the offset just past the number starting at b[i],
// which is '-' or a digit.
func validNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		if i+1 < len(b) && b[i+1] == 'I' {
			return validLiteral(b, i, "-Infinity")
		}
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0, fmt.Errorf("invalid number at offset %d", start)
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	return i, nil
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// validLiteral returns the offset just past lit (true, false or null),
// which must start at b[i].
func validLiteral(b []byte, i int, lit string) (int, error) {
	if end := i + len(lit); end <= len(b) && string(b[i:end]) == lit {
		return end, nil
	}
	return 0, fmt.Errorf("expected %s at offset %d", lit, i)
}
