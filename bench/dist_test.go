package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestParseDist(t *testing.T) {
	f := func(s string, want Dist) {
		t.Helper()
		got, err := ParseDist(s)
		if err != nil {
			t.Fatalf("ParseDist(%q): %v", s, err)
		}
		if got != want {
			t.Fatalf("ParseDist(%q): got %+v; want %+v", s, got, want)
		}
		if again, err := ParseDist(got.String()); err != nil || again != got {
			t.Fatalf("ParseDist(%q) of %q: got %+v, %v; want %+v", got.String(), s, again, err, got)
		}
	}
	f("32", Fixed(32))
	f("1", Fixed(1))
	f("1048576", Fixed(1<<20))
	f("uniform:16:64", Dist{Law: LawUniform, A: 16, B: 64})
	f("uniform:5:5", Dist{Law: LawUniform, A: 5, B: 5})
	f("normal:32:8", Dist{Law: LawNormal, A: 32, B: 8})
	f("normal:0.5:0", Dist{Law: LawNormal, A: 0.5, B: 0})
	f("lognormal:200:150.5", Dist{Law: LawLognormal, A: 200, B: 150.5})
	f("normal:1048576:1e300", Dist{Law: LawNormal, A: 1 << 20, B: 1e300})
	f("lognormal:16:1e150", Dist{Law: LawLognormal, A: 16, B: 1e150})
}

func TestParseDistErrors(t *testing.T) {
	f := func(s, want string) {
		t.Helper()
		_, err := ParseDist(s)
		if err == nil || err.Error() != want {
			t.Fatalf("ParseDist(%q): got error %v; want %q", s, err, want)
		}
	}
	const wantForms = "want an integer, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD"
	f("", `cannot parse distribution "": `+wantForms)
	f("many", `cannot parse distribution "many": `+wantForms)
	f("1.5", `cannot parse distribution "1.5": `+wantForms)
	f("0", `cannot parse distribution "0": want a value from 1 to 1048576, not 0`)
	f("-3", `cannot parse distribution "-3": want a value from 1 to 1048576, not -3`)
	f("2000000", `cannot parse distribution "2000000": want a value from 1 to 1048576, not 2000000`)
	f("poisson:3:1", `cannot parse distribution "poisson:3:1": unknown law "poisson"; want uniform, normal or lognormal`)
	f("uniform:5", `cannot parse distribution "uniform:5": want uniform:MIN:MAX`)
	f("normal:1:2:3", `cannot parse distribution "normal:1:2:3": want normal:MEAN:SD`)
	f("uniform:1.5:3", `cannot parse distribution "uniform:1.5:3": want uniform:MIN:MAX with integer numbers`)
	f("normal:x:3", `cannot parse distribution "normal:x:3": want normal:MEAN:SD with decimal numbers`)
	f("uniform:9:3", `cannot parse distribution "uniform:9:3": want 1 <= MIN <= MAX <= 1048576, not 9 and 3`)
	f("uniform:0:3", `cannot parse distribution "uniform:0:3": want 1 <= MIN <= MAX <= 1048576, not 0 and 3`)
	f("normal:0:3", `cannot parse distribution "normal:0:3": want a positive mean and a non-negative standard deviation, not 0 and 3`)
	f("lognormal:10:-1", `cannot parse distribution "lognormal:10:-1": want a positive mean and a non-negative standard deviation, not 10 and -1`)
	f("normal:NaN:1", `cannot parse distribution "normal:NaN:1": want a positive mean and a non-negative standard deviation, not NaN and 1`)
	f("lognormal:10:Inf", `cannot parse distribution "lognormal:10:Inf": want a positive mean and a non-negative standard deviation, not 10 and +Inf`)
	// A mean above the bound a fixed value has: normal:1e300:1 was taken,
	// and every draw clamped.
	f("normal:1048577:1", `cannot parse distribution "normal:1048577:1": want a mean of at most 1048576, not 1048577`)
	f("normal:1e300:1", `cannot parse distribution "normal:1e300:1": want a mean of at most 1048576, not 1e+300`)
	// Parameters of the underlying normal law that overflow: the first
	// sent max_new_tokens -9223372036854775808, the second ran out of
	// memory building a prompt of as many words.
	f("lognormal:1:1e200", `cannot parse distribution "lognormal:1:1e200": mean 1 and standard deviation 1e+200 overflow the parameters of the underlying normal law`)
	f("lognormal:1e-200:0", `cannot parse distribution "lognormal:1e-200:0": mean 1e-200 and standard deviation 0 overflow the parameters of the underlying normal law`)
}

// TestDistDraw checks each law's draws over many samples: bounds, and
// means within a few percent, since the log-normal's parameters are
// converted from the mean and standard deviation asked for.
func TestDistDraw(t *testing.T) {
	const n = 100000
	for _, tc := range []struct {
		spec     string
		lo, hi   int     // every draw is in [lo, hi]
		mean, sd float64 // of the draws, within 3%
	}{
		{"7", 7, 7, 7, 0},
		{"uniform:16:64", 16, 64, 40, math.Sqrt((49*49 - 1) / 12.0)},
		{"normal:300:30", 1, maxDraw, 300, 30},
		{"lognormal:200:100", 1, maxDraw, 200, 100},
	} {
		d, err := ParseDist(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var sum, sq float64
		seen := map[int]bool{}
		for range n {
			v := d.draw(rng)
			if v < tc.lo || v > tc.hi {
				t.Fatalf("%s: got draw %d; want it in [%d, %d]", tc.spec, v, tc.lo, tc.hi)
			}
			seen[v] = true
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		if math.Abs(mean-tc.mean) > 0.03*tc.mean || math.Abs(sd-tc.sd) > 0.03*tc.sd+0.5 {
			t.Fatalf("%s: got mean %.2f, sd %.2f; want %.2f, %.2f", tc.spec, mean, sd, tc.mean, tc.sd)
		}
		if d.Law == LawUniform && (!seen[tc.lo] || !seen[tc.hi]) {
			t.Fatalf("%s: got no draw of a bound; want both", tc.spec)
		}
	}
}

// TestDistDrawClamped checks a law that mostly draws below 1.
func TestDistDrawClamped(t *testing.T) {
	d := Dist{Law: LawNormal, A: 1, B: 50}
	rng := rand.New(rand.NewPCG(3, 4))
	ones := 0
	for range 1000 {
		v := d.draw(rng)
		if v < 1 {
			t.Fatalf("got draw %d; want at least 1", v)
		}
		if v == 1 {
			ones++
		}
	}
	if ones < 400 {
		t.Fatalf("got %d draws of 1 in 1000; want about half clamped to 1", ones)
	}
}

// TestDistDrawNaN draws from parameters that make NaN, which check now
// refuses: the clamp once passed NaN on, and int(NaN) is -1<<63 on amd64.
func TestDistDrawNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range []Dist{
		{Law: LawLognormal, A: 1, B: 1e200}, // -Inf + Inf×N
		{Law: LawNormal, A: math.NaN(), B: 1},
		{Law: LawNormal, A: 1e308, B: 1e308}, // +Inf past the bound
	} {
		for range 100 {
			if v := d.draw(rng); v < 1 || v > maxDraw {
				t.Fatalf("%+v: got draw %d; want it in [1, %d]", d, v, maxDraw)
			}
		}
	}
}
