package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"
)

// MarshalJSON encodes the comparison as its rounds, the round limit it was
// given, and every target's report, in order.
func (c Comparison) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Rounds   int       `json:"rounds"`
		Planned  int       `json:"rounds_planned"`
		Round    float64   `json:"round_s"`
		MaxRound float64   `json:"max_round_s"`
		Targets  []*Report `json:"targets"`
	}{c.Rounds, c.Planned, seconds(c.Round), seconds(c.MaxRound), c.Reports})
}

// WriteJSON writes c as one indented JSON object.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// figure is one row of the comparison table: a name, and how to read it
// from a report (ok false when the report has no such figure).
type figure struct {
	name  string
	value func(r *Report) (v float64, ok bool)
	text  func(v float64) string
}

// WriteText writes c as one compact table for people: a row per figure, a
// column per target, and after each target but the first its ratio to the
// first. A figure no target has is left out. Ratios are "-" when no round
// was complete: the targets then ran for unequal times.
func (c *Comparison) WriteText(w io.Writer) error {
	if len(c.Reports) == 0 {
		panic("BUG: a comparison without reports")
	}
	var b bytes.Buffer
	c.writeHeader(&b)
	rows := compareFigures(c.Reports)
	widths := make([]int, len(c.Reports))
	fmt.Fprintf(&b, "\n%-16s", "")
	for i, r := range c.Reports {
		widths[i] = max(12, len(r.Name)+2)
		fmt.Fprintf(&b, "%*s", widths[i], r.Name)
		if i > 0 {
			fmt.Fprintf(&b, "%*s", ratioWidth(c.Reports, i), r.Name+"/"+c.Reports[0].Name)
		}
	}
	b.WriteByte('\n')
	for _, f := range rows {
		fmt.Fprintf(&b, "%-16s", f.name)
		base, baseOK := f.value(c.Reports[0])
		for i, r := range c.Reports {
			v, ok := f.value(r)
			cell := "-"
			if ok {
				cell = f.text(v)
			}
			fmt.Fprintf(&b, "%*s", widths[i], cell)
			if i > 0 {
				fmt.Fprintf(&b, "%*s", ratioWidth(c.Reports, i), ratio(v, ok && c.Rounds > 0, base, baseOK))
			}
		}
		b.WriteByte('\n')
	}
	for _, r := range c.Reports {
		if len(r.ErrorMessages) > 0 {
			b.WriteByte('\n')
			b.Write(appendMessages(nil, "errors of "+r.Name+"  ", r.ErrorMessages))
		}
		if n := r.otherFailures(); n > 0 {
			fmt.Fprintf(&b, "and %s with other messages\n", plural(n, "failure"))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeHeader writes what was compared, how, and each target.
func (c *Comparison) writeHeader(b *bytes.Buffer) {
	first := c.Reports[0]
	rounds := fmt.Sprintf("%d rounds", c.Rounds)
	switch {
	case c.Planned > c.Rounds:
		rounds = fmt.Sprintf("%d of %d rounds", c.Rounds, c.Planned)
	case c.Rounds == 1:
		rounds = "1 round"
	}
	fmt.Fprintf(b, "%-12s %s (%s); %s of %.2f s per target, in turns\n", "compare",
		first.Route, first.loadText(), rounds, c.Round.Seconds())
	fmt.Fprintf(b, "%-12s %s\n", "workload", first.workloadText())
	lag := false
	for _, r := range c.Reports {
		fmt.Fprintf(b, "%-12s %s (%d warm-up requests not counted)\n", r.Name, r.URL, r.WarmupRequests)
		lag = lag || r.EventLag.Count > 0
	}
	if lag {
		fmt.Fprintf(b, "%-12s %s\n", "lag", lagNote)
	}
	if first.BestCacheHitRate > 0 {
		fmt.Fprintf(b, "%-12s %.3f, the best hit rate any router could reach on this workload\n", "best hits", first.BestCacheHitRate)
	}
	for _, r := range c.Reports {
		if r.GaveUp != "" {
			fmt.Fprintf(b, "%-12s %s: %s\n", "gave up", r.Name, r.GaveUp)
			b.Write(appendMessages(nil, fmt.Sprintf("%-12s ", ""), r.GaveUpMessages))
		}
	}
	switch {
	case first.Interrupted && c.Rounds > 0:
		fmt.Fprintf(b, "%-12s %s\n", "interrupted", "yes: figures cover the rounds every target completed")
	case first.Interrupted:
		fmt.Fprintf(b, "%-12s %s\n", "interrupted", "yes, in the first round: figures cover the requests finished before, no ratios")
	}
}

// ratioWidth is the width of the ratio column after target i.
func ratioWidth(rs []*Report, i int) int {
	return max(9, len(rs[i].Name)+len(rs[0].Name)+3)
}

// ratio formats v/base, or "-" when either is missing or base is zero.
func ratio(v float64, ok bool, base float64, baseOK bool) string {
	if !ok || !baseOK || base == 0 {
		return "-"
	}
	return strconv.FormatFloat(v/base, 'f', 3, 64)
}

// compareFigures lists the rows of a comparison of rs: counts, rates, then
// the percentiles of every duration summary some target has samples of.
func compareFigures(rs []*Report) []figure {
	count := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	rate := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	always := func(get func(r *Report) float64) func(r *Report) (float64, bool) {
		return func(r *Report) (float64, bool) { return get(r), true }
	}
	fs := []figure{
		{"requests", always(func(r *Report) float64 { return float64(r.Requests) }), count},
		{"errors", always(func(r *Report) float64 { return float64(r.Requests - r.OK) }), count},
	}
	kinds := map[string]bool{}
	for _, r := range rs {
		for k := range r.Errors {
			kinds[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		fs = append(fs, figure{"  " + k, always(func(r *Report) float64 { return float64(r.Errors[k]) }), count})
	}
	fs = append(fs,
		figure{"req/s", always(func(r *Report) float64 { return r.RequestsPerSec }), rate},
		figure{"output tok/s", always(func(r *Report) float64 { return r.OutputTokensPerSec }), rate},
	)
	if rs[0].Stream {
		fs = append(fs, figure{"events/s", always(func(r *Report) float64 { return r.EventsPerSec }), rate})
	}
	if slices.ContainsFunc(rs, func(r *Report) bool { return r.CacheReports > 0 }) {
		fs = append(fs, figure{"cache hit rate", func(r *Report) (float64, bool) {
			return r.CacheHitRate, r.CacheReports > 0
		}, func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }})
	}
	for _, s := range []struct {
		name string
		get  func(r *Report) Summary
	}{
		{"latency", func(r *Report) Summary { return r.Latency }},
		{"ttft", func(r *Report) Summary { return r.TTFT }},
		{"itl", func(r *Report) Summary { return r.ITL }},
		{"lag", func(r *Report) Summary { return r.EventLag }},
	} {
		if s.name == "ttft" && !rs[0].Stream {
			continue // the latency of a non-stream request
		}
		fs = append(fs, summaryFigures(rs, s.name, s.get)...)
	}
	return fs
}

// summaryFigures lists the p50, p90, p99 and max rows of a duration
// summary, as the single-target table has them, or none when no report has
// samples of it.
func summaryFigures(rs []*Report, name string, get func(r *Report) Summary) []figure {
	if !slices.ContainsFunc(rs, func(r *Report) bool { return get(r).Count > 0 }) {
		return nil
	}
	ms := func(v float64) string { return formatMillis(time.Duration(v)) }
	row := func(label string, pick func(s Summary) time.Duration) figure {
		return figure{name + " " + label + " ms", func(r *Report) (float64, bool) {
			s := get(r)
			return float64(pick(s)), s.Count > 0
		}, ms}
	}
	return []figure{
		row("p50", func(s Summary) time.Duration { return s.P50 }),
		row("p90", func(s Summary) time.Duration { return s.P90 }),
		row("p99", func(s Summary) time.Duration { return s.P99 }),
		row("max", func(s Summary) time.Duration { return s.Max }),
	}
}
