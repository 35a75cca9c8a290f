package cli

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
)

// pdlb reads numbers on its command line itself: kong's errors tell the
// Go type, "--port: expected a valid 64 bit int but got "abc"", where a
// user wants to know what the flag takes (issue 20). kong puts the flag's
// name in front of each error.

// WantPort is what a port flag takes, as its errors say.
const WantPort = "a port number 1-65535"

// NumberMappers are the options that read numbers: integers and floats by
// kind, ports (a flag tagged type:"port", or type:"port-or-zero" where 0
// turns a listener off) by name. Integers are decimal, as argparse's
// int() reads them: kong's "08000" was an octal number gone wrong.
func NumberMappers() []kong.Option {
	return []kong.Option{
		kong.KindMapper(reflect.Int, intMapper(strconv.IntSize)),
		kong.KindMapper(reflect.Int64, intMapper(64)),
		kong.KindMapper(reflect.Uint64, uintMapper(64)),
		kong.KindMapper(reflect.Float64, floatMapper(64)),
		kong.NamedMapper("port", portMapper(false)),
		kong.NamedMapper("port-or-zero", portMapper(true)),
	}
}

// popNumber pops a flag's value as text.
func popNumber(ctx *kong.DecodeContext) (string, error) {
	tok, err := ctx.Scan.PopValue("number")
	if err != nil {
		return "", err
	}
	return fmt.Sprint(tok.Value), nil
}

// pythonNumber is s as Go's strconv reads the number Python's int() and
// float() read in it (argparse's readers, so sglang_router's): surrounding
// whitespace is dropped, and so are underscores that sit between two
// digits ("1_800"). Any other underscore is left, for strconv to refuse.
func pythonNumber(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "_") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i > 0 && i+1 < len(s) && isDigit(s[i-1]) && isDigit(s[i+1]) {
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// unit is what a flag's number counts, as its errors say: the seconds of
// the -secs flags (sglang_router's names), else nothing.
func unit(ctx *kong.DecodeContext) string {
	if strings.HasSuffix(ctx.Value.Name, "-secs") {
		return " of seconds"
	}
	return ""
}

// badNumber is the error of a value s that is not what want says; err is
// strconv's, which tells a number out of range.
func badNumber(want, s string, err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("expected %s, got %q, which is out of range", want, s)
	}
	return fmt.Errorf("expected %s, got %q", want, s)
}

func intMapper(bits int) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		s, err := popNumber(ctx)
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(pythonNumber(s), 10, bits)
		if err != nil {
			return badNumber("a whole number"+unit(ctx), s, err)
		}
		target.SetInt(n)
		return nil
	}
}

func uintMapper(bits int) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		s, err := popNumber(ctx)
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(pythonNumber(s), "+"), 10, bits)
		if err != nil {
			return badNumber("a whole number"+unit(ctx)+", 0 or more", s, err)
		}
		target.SetUint(n)
		return nil
	}
}

func floatMapper(bits int) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		s, err := popNumber(ctx)
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(pythonNumber(s), bits)
		if err != nil {
			return badNumber("a number"+unit(ctx), s, err)
		}
		target.SetFloat(f)
		return nil
	}
}

// portMapper reads a TCP port into an int; with zero, 0 too, which turns
// the flag's listener off.
func portMapper(zero bool) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		s, err := popNumber(ctx)
		if err != nil {
			return err
		}
		if n, err := strconv.Atoi(pythonNumber(s)); zero && err == nil && n == 0 {
			target.SetInt(0)
			return nil
		}
		n, ok := ParsePort(pythonNumber(s))
		if !ok {
			if zero {
				return fmt.Errorf("expected %s, or 0 for none, got %q", WantPort, s)
			}
			return fmt.Errorf("expected %s, got %q", WantPort, s)
		}
		target.SetInt(int64(n))
		return nil
	}
}

// ParsePort reads a TCP port from 1 to 65535.
func ParsePort(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && n <= 65535
}

// ParseCommand parses args into cmd, one command's flags struct, with the
// number readers main gives every command: what a command's own tests
// need to check its flags without main's parser.
func ParseCommand(cmd any, args ...string) error {
	parser, err := kong.New(cmd, NumberMappers()...)
	if err != nil {
		return err
	}
	_, err = parser.Parse(args)
	return err
}
