package hostile

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// form is how hard the suite attacks.
type form struct {
	// baseline is how many well-behaved requests the baseline measures;
	// recovery, how many more must end after the attacker lets go.
	baseline, recovery int
	// hold is how long an attack holds what it took (connections,
	// streams) before it lets go.
	hold time.Duration

	declaredConns  int   // (1) connections declaring 268435455 bytes
	slowBodies     int   // (1) connections trickling a 128 KiB body
	chunkedBody    int   // (2) bytes of the large chunked body
	batchBodies    []int // (3) sizes of the bodies of empty batch items
	idleBeyond     int   // (4) idle connections beyond pdlb's limit
	stalledStreams int   // (6)
	droppedBatches int   // (8) over hold
	largeAnswers   int   // clients asking for huge answers (largeAnswers)
}

// forms are PDLB_HOSTILE's values: "short", run by CI in a minute or two,
// and "full", the sizes the issue reports.
var forms = map[string]form{
	"short": {
		baseline: 120, recovery: 40, hold: 4 * time.Second,
		declaredConns: 4, slowBodies: 300, chunkedBody: 136 << 20, batchBodies: []int{24 << 20},
		idleBeyond: 512, stalledStreams: 24, droppedBatches: 60, largeAnswers: 8,
	},
	"full": {
		baseline: 400, recovery: 80, hold: 15 * time.Second,
		declaredConns: 16, slowBodies: 3000, chunkedBody: 150_000_000, batchBodies: []int{24 << 20, 90 << 20},
		idleBeyond: 2048, stalledStreams: 48, droppedBatches: 560, largeAnswers: 16,
	},
}

// attack is one attack of issue 19. TestHostile runs it between a baseline
// and a recovery phase of the well-behaved load, and checks what every
// attack must keep; run checks what is particular to it.
type attack struct {
	name string
	// env is what the attack asks of its pdlb; nil means the suite's
	// defaults.
	env func(f form) envConfig
	// p99Slack, when not nil, is what the attack may add to the
	// well-behaved p99 beyond p99Bound, and why is in its doc comment.
	p99Slack func(f form) time.Duration
	// rssOverhead, when not zero, is what pdlb's RSS may reach beyond its
	// body memory instead of rssOverhead, and why is in its doc comment.
	rssOverhead int64
	run         func(a *arena)
}

// attacks are issue 19's, in its order.
var attacks = []attack{
	{name: "declared-lengths", run: declaredLengths},
	{name: "chunked-body", env: chunkedBodyEnv, p99Slack: largeBodySlack, run: chunkedBody},
	{name: "empty-batch-items", p99Slack: largeBodySlack, run: emptyBatchItems},
	{name: "idle-connections", run: idleConnections},
	{name: "control-routes", env: controlRoutesEnv, run: controlRoutes},
	{name: "control-routes-remote", env: controlRoutesRemoteEnv, run: controlRoutesRemote},
	{name: "stalled-streams", env: stalledStreamsEnv, p99Slack: stallLetGo, run: stalledStreams},
	{name: "escaped-bootstrap-keys", env: escapedBootstrapKeysEnv, run: escapedBootstrapKeys},
	{name: "dropped-batches", run: droppedBatches},
	{name: "header-leaks", run: headerLeaks},
	{name: "large-answers", env: largeAnswersEnv, p99Slack: largeAnswersSlack, rssOverhead: largeAnswersOverhead, run: largeAnswers},
}

// arena is what an attack works with: its test, pdlb and its workers, the
// form, and the monitor of pdlb's resources.
type arena struct {
	*testing.T
	env  *env
	form form
	mon  *monitor
}

// repeat calls f every `every`, from now until form.hold has passed, at
// least once: an attack made of quick requests keeps on for as long as the
// others hold what they took, beside the well-behaved load.
func (a *arena) repeat(every time.Duration, f func()) {
	pace := time.NewTicker(every)
	defer pace.Stop()
	for end := time.Now().Add(a.form.hold); ; <-pace.C {
		f()
		if time.Now().After(end) {
			return
		}
	}
}

const (
	// rssOverhead is what pdlb may hold beyond its body budget: the
	// runtime, buffers of a few thousand connections, the garbage of the
	// well-behaved load. Idle, pdlb holds about 16 MiB.
	rssOverhead = 128 << 20
	// rssBudget is the most pdlb's RSS may reach, ever.
	rssBudget = bodyMemory + rssOverhead
	// rssReturnSlack is how far above its RSS before the attack pdlb's may
	// stay once the attack is over, and rssReturnTimeout how long it may
	// take to get there.
	rssReturnSlack   = 64 << 20
	rssReturnTimeout = 10 * time.Second
	// phaseTimeout bounds the baseline and the recovery phases.
	phaseTimeout = 60 * time.Second
)

// p99Bound is the most the well-behaved clients' p99 may reach during an
// attack: five times the baseline's, or the baseline's plus 250 ms,
// whichever is larger. The baseline p99 of these short requests is 10-20 ms
// on a quiet machine, so the multiple alone is a bound that mere scheduling
// crosses: on this two-core machine, loaded by other builds and tests, the
// p99 of an attack that did nothing reached 110 ms, and a phase after an
// attack that pdlb withstood 200 ms, over a baseline of 12 ms. The issue's
// attacks cost the well-behaved clients far more: a p99 of 0.75-1.5 s under
// declared lengths, 0.8-10 s when descriptors run out, 10 s timeouts when
// streams stall.
func p99Bound(baseline time.Duration) time.Duration {
	return max(5*baseline, baseline+250*time.Millisecond)
}

func TestHostile(t *testing.T) {
	f, ok := forms[os.Getenv("PDLB_HOSTILE")]
	if !ok {
		t.Skip("the hostile-client suite runs with PDLB_HOSTILE=short or full (make hostile-short, make hostile)")
	}
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatalf("the suite needs prlimit (util-linux) to limit pdlb's descriptors: %v", err)
	}
	bins := buildPDLB(t)
	help := serveHelp(t, bins.serve)
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) { runAttack(t, bins, help, f, a) })
	}
}

// runAttack starts pdlb for a, measures the baseline, runs a, lets the
// load go on after it, and checks what every attack must keep.
func runAttack(t *testing.T, bins binaries, help string, f form, a attack) {
	var cfg envConfig
	if a.env != nil {
		cfg = a.env(f)
	}
	if cfg.skip != "" {
		t.Skip(cfg.skip)
	}
	e := startEnv(t, bins, help, cfg)
	mon := startMonitor(e.pdlb)
	defer mon.close()
	ld := startLoad(e.base)
	if err := ld.waitCount(f.baseline, phaseTimeout); err != nil {
		ld.close()
		t.Fatalf("baseline: %v", err)
	}
	start := time.Now()
	base := ld.between(time.Time{}, start)
	if len(base.errors) > 0 {
		ld.close()
		t.Fatalf("before any attack, %s", base.describeErrors())
	}
	rssBefore := mon.latest().rss

	a.run(&arena{T: t, env: e, form: f, mon: mon})

	letGo := time.Now()
	err := ld.waitCount(ld.count()+f.recovery, phaseTimeout)
	end := time.Now()
	ld.close()
	if err != nil {
		t.Errorf("after the attack: %v", err)
	}
	during, after := ld.between(start, letGo), ld.between(letGo, end)
	t.Logf("well-behaved p99: %v baseline (%d requests), %v during the attack (%d), %v after (%d)",
		base.p99(), len(base.took), during.p99(), len(during.took), after.p99(), len(after.took))
	checkAlive(t, e, mon)
	var slack time.Duration
	if a.p99Slack != nil {
		slack = a.p99Slack(f)
	}
	checkLoad(t, base, during, after, slack)
	overhead := int64(rssOverhead)
	if a.rssOverhead != 0 {
		overhead = a.rssOverhead
	}
	checkResources(t, e, mon, rssBefore, overhead)
	if lines := e.workersMarkedDown(); len(lines) > 0 {
		t.Errorf("pdlb took workers out of selection %d times; first: %s", len(lines), lines[0])
	}
}

// checkAlive checks that pdlb is alive and answers /liveness.
func checkAlive(t *testing.T, e *env, mon *monitor) {
	t.Helper()
	if rss := mon.killedAt(); rss > 0 {
		t.Errorf("pdlb reached %s of RSS: killed to protect the machine", mib(rss))
	}
	if !e.pdlb.alive() {
		t.Errorf("pdlb died: %v", e.pdlb.err)
		return
	}
	if err := e.liveness(); err != nil {
		t.Errorf("pdlb's /liveness: %v", err)
	}
}

// checkLoad checks that the well-behaved clients saw no error during the
// attack or after it, and a p99 within p99Bound of the baseline's, plus
// slack.
func checkLoad(t *testing.T, base, during, after stats, slack time.Duration) {
	t.Helper()
	if len(during.errors) > 0 {
		t.Errorf("during the attack, %s", during.describeErrors())
	}
	if len(after.errors) > 0 {
		t.Errorf("after the attacker let go, %s", after.describeErrors())
	}
	if got, bound := during.p99(), p99Bound(base.p99())+slack; got > bound {
		t.Errorf("during the attack, the well-behaved p99 was %v; want at most %v (baseline %v)", got, bound, base.p99())
	}
}

// checkResources checks pdlb's RSS and descriptors against their budgets,
// and that its RSS comes back down after the attack.
func checkResources(t *testing.T, e *env, mon *monitor, rssBefore, overhead int64) {
	t.Helper()
	rss, fds := mon.peak(time.Time{})
	if peak, err := hwm(e.pdlb.pid()); err == nil {
		rss = max(rss, peak)
	}
	t.Logf("pdlb's peak RSS %s (before the attack %s), peak descriptors %d of %d", mib(rss), mib(rssBefore), fds, nofile)
	if budget := bodyMemory + overhead; rss > budget {
		t.Errorf("pdlb's RSS reached %s; want at most %s (--max-body-memory %s plus %s)",
			mib(rss), mib(budget), mib(bodyMemory), mib(overhead))
	}
	if fds >= nofile {
		t.Errorf("pdlb's open descriptors reached %d, its limit", fds)
	}
	if !e.pdlb.alive() {
		return
	}
	if !pollUntil(time.Now().Add(rssReturnTimeout), func() bool { return mon.latest().rss <= rssBefore+rssReturnSlack }) {
		t.Errorf("pdlb's RSS stayed at %s for %v after the attack; want it back under %s",
			mib(mon.latest().rss), rssReturnTimeout, mib(rssBefore+rssReturnSlack))
	}
}
