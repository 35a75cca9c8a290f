package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// minRound is the shortest Compare round. Every round ends by waiting for
// its requests, and sends at least one per client however short it is, so
// a round of microseconds would plan millions of rounds that measure only
// that wait.
const minRound = 100 * time.Millisecond

// Target is one endpoint of a Compare.
type Target struct {
	// Name labels the target's figures, e.g. "direct" or "pdlb".
	Name string
	// URL is the target's base URL, as Config.URL.
	URL string
}

// ParseTarget reads a target written NAME=URL, as --compare takes it.
func ParseTarget(s string) (Target, error) {
	name, url, ok := strings.Cut(s, "=")
	if !ok || name == "" || url == "" {
		return Target{}, fmt.Errorf("cannot parse target %q: want NAME=URL", s)
	}
	return Target{Name: name, URL: url}, nil
}

// Comparison holds the figures of a Compare. It is plain data owned by the
// caller.
type Comparison struct {
	// Rounds is the number of rounds each target had, and Round the
	// measured length of each (a first round also had the warm-up).
	// Planned is the number of rounds planned: more than Rounds when the
	// comparison was interrupted, in which case the figures are those of
	// the Rounds complete turns of every target, so that they compare like
	// with like; interrupted in the first, they are what each target did
	// before, and Rounds is zero.
	Rounds  int
	Planned int
	Round   time.Duration
	// MaxRound is Config.Round, default applied: the longest round asked
	// for, from which Rounds and Round were planned.
	MaxRound time.Duration
	// Reports holds each target's figures, in the order of the targets:
	// the first is the baseline every ratio is taken against.
	Reports []*Report
}

// Compare sends the load cfg describes to each target in turn, in rounds,
// and returns every target's figures. Each target gets cfg.Duration of
// measured load, cut into rounds of at most cfg.Round; the targets take
// turns in the given order (A B A B ...), so that noise on the machine hits
// them all alike. A plain cycle, rather than A B B A, keeps every target's
// idle time between its rounds to one round of each other target, so short
// rounds find their keep-alive connections still open (the client drops
// them after 3 s idle). A round waits for its requests to end before the
// next target's begins, so targets never share the machine's load.
//
// cfg.URL is ignored, and cfg.Requests must be zero: a comparison is
// bounded by time. Errors and cancellation behave as in Run; a cancelled
// Compare marks every report Interrupted.
func Compare(ctx context.Context, cfg Config, targets []Target) (*Comparison, error) {
	if err := checkCompare(&cfg, targets); err != nil {
		return nil, err
	}
	urls := make([]string, len(targets))
	for i, tg := range targets {
		urls[i] = tg.URL
	}
	route, err := resolveRoute(cfg.Route, urls...)
	if err != nil {
		return nil, err
	}
	cfg.Route = route
	if cfg.Duration == 0 {
		// Before withDefaults, which bounds a run by Duration only
		// when it has no request count, and a SharedPrefix has one.
		cfg.Duration = defaultDuration
	}
	cfg = cfg.withDefaults()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	rs := make([]*runner, 0, len(targets))
	defer func() {
		for _, r := range rs {
			r.t.close()
		}
	}()
	for _, tg := range targets {
		r, err := newRunner(ctx, stop, &cfg, tg)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", tg.Name, err)
		}
		rs = append(rs, r)
	}
	n, d := planRounds(cfg.Duration, cfg.Round)
	p := newProgress(&cfg)
	for _, r := range rs {
		r.progress = p
	}
	p.start()
	done, interrupted := compareRounds(ctx, &cfg, rs, n, d)
	p.end()
	c := &Comparison{Rounds: done, Planned: n, Round: d, MaxRound: cfg.Round}
	for _, r := range rs {
		rep := r.report()
		rep.Interrupted = rep.Interrupted || interrupted
		c.Reports = append(c.Reports, rep)
	}
	return c, nil
}

// checkCompare rejects a Config or targets Compare cannot run.
func checkCompare(cfg *Config, targets []Target) error {
	if err := cfg.validateLoad(); err != nil {
		return err
	}
	if cfg.Requests > 0 {
		return errors.New("compare is bounded by duration, not by a request count")
	}
	if cfg.Round > 0 && cfg.Round < minRound {
		return fmt.Errorf("round must be at least %v, not %v: each round waits for its requests to end", minRound, cfg.Round)
	}
	if len(targets) == 0 {
		return errors.New("compare needs at least one target")
	}
	var names []string
	for _, tg := range targets {
		if tg.Name == "" || tg.URL == "" {
			return fmt.Errorf("target %q=%q: want a name and a url", tg.Name, tg.URL)
		}
		if slices.Contains(names, tg.Name) {
			return fmt.Errorf("two targets are named %q", tg.Name)
		}
		names = append(names, tg.Name)
	}
	return nil
}

// planRounds cuts each target's measured time total into the fewest rounds
// no longer than round: n rounds of d.
func planRounds(total, round time.Duration) (n int, d time.Duration) {
	n = int((total + round - 1) / round)
	return n, total / time.Duration(n)
}

// compareRounds runs n rounds of d on each runner, in turns, and returns
// how many rounds every runner completed and whether an interrupt (ctx
// cancelled, but not by a give-up) ended the comparison early. Cut short
// after a complete round, it takes every runner back to the end of the
// last one: a target that had one more turn than another, or part of one,
// would not compare with it.
func compareRounds(ctx context.Context, cfg *Config, rs []*runner, n int, d time.Duration) (done int, interrupted bool) {
	marks := make([]mark, len(rs))
	total := time.Duration(len(rs)) * (cfg.Warmup + time.Duration(n)*d)
	var sched time.Duration // the turns' so far
	for i := range n {
		for _, r := range rs {
			if ctx.Err() != nil {
				break
			}
			var warmup time.Duration
			if i == 0 {
				warmup = cfg.Warmup
			}
			r.label = fmt.Sprintf("%s %d/%d  ", r.name, i+1, n)
			r.schedBefore, r.schedTotal = sched, total
			r.round(warmup, d)
			sched += warmup + d
		}
		if ctx.Err() != nil {
			break
		}
		done = i + 1
		if done < n {
			for j, r := range rs {
				marks[j] = r.mark()
			}
		}
	}
	if ctx.Err() == nil {
		return done, false
	}
	if done > 0 {
		for j, r := range rs {
			r.rollback(marks[j])
		}
	}
	return done, !gaveUp(ctx)
}
