package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Laws a Dist can follow.
const (
	// LawFixed is one value for every request.
	LawFixed = "fixed"
	// LawUniform draws integers from [A, B], both included.
	LawUniform = "uniform"
	// LawNormal draws from a normal law of mean A and standard deviation B.
	LawNormal = "normal"
	// LawLognormal draws from a log-normal law whose values have mean A and
	// standard deviation B (not the parameters of the underlying normal):
	// the long right tail of real prompt and output lengths, with the same
	// two numbers as LawNormal.
	LawLognormal = "lognormal"
)

// maxDraw bounds a drawn value, so a wide normal or log-normal tail cannot
// ask for a prompt or an output of millions of tokens.
const maxDraw = 1 << 20

// Dist is the distribution of a per-request size, such as the prompt
// length or the output length. Draws are rounded to the nearest integer and
// clamped to [1, 2^20]; a fixed value, a uniform law's bounds and a mean
// must be within 2^20 too. It is plain data, safe to copy and to share; the
// zero Dist means "the default" to Config.
//
// Its text form, read by ParseDist and UnmarshalText and written by
// String, is "N" (fixed), "uniform:MIN:MAX", "normal:MEAN:SD" or
// "lognormal:MEAN:SD".
type Dist struct {
	// Law is one of the Law constants.
	Law string
	// A and B are the law's parameters: the value (A) of LawFixed, the
	// bounds of LawUniform, the mean and standard deviation of the others.
	A, B float64
}

// Fixed returns the Dist that is always n.
func Fixed(n int) Dist { return Dist{Law: LawFixed, A: float64(n)} }

// ParseDist reads a Dist from its text form.
func ParseDist(s string) (Dist, error) {
	d, err := parseDist(s)
	if err != nil {
		return Dist{}, fmt.Errorf("cannot parse distribution %q: %w", s, err)
	}
	return d, nil
}

func parseDist(s string) (Dist, error) {
	law, rest, found := strings.Cut(s, ":")
	if !found {
		n, err := strconv.Atoi(s)
		if err != nil {
			return Dist{}, fmt.Errorf("want an integer, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD")
		}
		d := Fixed(n)
		return d, d.check()
	}
	switch law {
	case LawUniform, LawNormal, LawLognormal:
	default:
		return Dist{}, fmt.Errorf("unknown law %q; want uniform, normal or lognormal", law)
	}
	a, b, found := strings.Cut(rest, ":")
	if !found || strings.Contains(b, ":") {
		return Dist{}, fmt.Errorf("want %s:%s", law, paramNames(law))
	}
	d := Dist{Law: law}
	var errA, errB error
	if law == LawUniform {
		var ia, ib int
		ia, errA = strconv.Atoi(a)
		ib, errB = strconv.Atoi(b)
		d.A, d.B = float64(ia), float64(ib)
	} else {
		d.A, errA = strconv.ParseFloat(a, 64)
		d.B, errB = strconv.ParseFloat(b, 64)
	}
	if errA != nil || errB != nil {
		return Dist{}, fmt.Errorf("want %s:%s with %s numbers", law, paramNames(law), numberKind(law))
	}
	return d, d.check()
}

func paramNames(law string) string {
	if law == LawUniform {
		return "MIN:MAX"
	}
	return "MEAN:SD"
}

func numberKind(law string) string {
	if law == LawUniform {
		return "integer"
	}
	return "decimal"
}

// check rejects parameters that cannot draw a size of at least 1, a mean
// above maxDraw, and log-normal parameters that overflow.
func (d Dist) check() error {
	switch d.Law {
	case LawFixed:
		if d.A < 1 || d.A > maxDraw {
			return fmt.Errorf("want a value from 1 to %d, not %s", maxDraw, num(d.A))
		}
	case LawUniform:
		if d.A < 1 || d.B < d.A || d.B > maxDraw {
			return fmt.Errorf("want 1 <= MIN <= MAX <= %d, not %s and %s", maxDraw, num(d.A), num(d.B))
		}
	case LawNormal, LawLognormal:
		if !(d.A > 0) || !(d.B >= 0) || math.IsInf(d.A, 0) || math.IsInf(d.B, 0) {
			return fmt.Errorf("want a positive mean and a non-negative standard deviation, not %s and %s", num(d.A), num(d.B))
		}
		// A fixed value has the same bound: a mean above it would draw
		// the bound nearly every time, not the law asked for.
		if d.A > maxDraw {
			return fmt.Errorf("want a mean of at most %d, not %s", maxDraw, num(d.A))
		}
		if d.Law == LawLognormal {
			if mu, sigma := d.lognormal(); !finite(mu) || !finite(sigma) {
				return fmt.Errorf("mean %s and standard deviation %s overflow the parameters of the underlying normal law", num(d.A), num(d.B))
			}
		}
	default:
		return fmt.Errorf("unknown law %q", d.Law)
	}
	return nil
}

// String returns the text form of d.
func (d Dist) String() string {
	switch d.Law {
	case LawFixed:
		return num(d.A)
	case "":
		return ""
	}
	return d.Law + ":" + num(d.A) + ":" + num(d.B)
}

// num formats a parameter without an exponent, unless it is so large or
// small that the digits would run to hundreds (1e+300).
func num(x float64) string {
	if a := math.Abs(x); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// UnmarshalText reads the text form of a Dist, for flags.
func (d *Dist) UnmarshalText(text []byte) error {
	v, err := ParseDist(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText writes the text form of d, for JSON reports.
func (d Dist) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// fixed returns the value of a fixed Dist, and whether it is one.
func (d Dist) fixed() (int, bool) {
	return int(d.A), d.Law == LawFixed
}

// draw returns one value; rng may be nil for a fixed Dist.
func (d Dist) draw(rng *rand.Rand) int {
	var x float64
	switch d.Law {
	case LawFixed:
		return int(d.A)
	case LawUniform:
		return int(d.A) + rng.IntN(int(d.B-d.A)+1)
	case LawNormal:
		x = d.A + d.B*rng.NormFloat64()
	case LawLognormal:
		mu, sigma := d.lognormal()
		x = math.Exp(mu + sigma*rng.NormFloat64())
	default:
		panic("BUG: unchecked distribution law " + d.Law)
	}
	// Written so that NaN (inf - inf, 0 * inf) clamps too: min and max
	// pass it on, and int(NaN) is whatever the CPU makes of it.
	switch x = math.Round(x); {
	case x > maxDraw:
		return maxDraw
	case x >= 1:
		return int(x)
	}
	return 1
}

// lognormal returns the mean and standard deviation of the normal law
// underlying a LawLognormal d. For values of mean m and variance v, it has
// variance s2 = ln(1 + v/m²) and mean ln(m) - s2/2; neither is finite
// when v/m² overflows (or is 0/0).
func (d Dist) lognormal() (mu, sigma float64) {
	s2 := math.Log1p(d.B * d.B / (d.A * d.A))
	return math.Log(d.A) - s2/2, math.Sqrt(s2)
}

// finite reports whether x is neither infinite nor NaN.
func finite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }
