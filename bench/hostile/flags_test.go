package hostile

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// The flags the suite gives pdlb, in one place.

const (
	// bodyMemory is pdlb's --max-body-memory: the budget of request bodies
	// in flight. It is about the least pdlb takes with its default
	// --max-payload-size (three bodies of 256 MiB, the client's and a copy
	// for each worker, and pdlb's fields), below the default 1 GiB so that
	// an attack that commits memory for what a client declared shows
	// quickly.
	bodyMemory = 800 << 20
	// adminKey is the --admin-api-key of the control attack.
	adminKey = "hostile-admin-key"
	// stallTimeoutSecs is --client-stall-timeout-secs: how long a stream's
	// client may read nothing before pdlb lets it go.
	stallTimeoutSecs = 2
)

// serveFlag is a flag of `pdlb serve`, with its value ("" for a boolean).
type serveFlag struct {
	name, value string
}

// suiteFlags are given to every pdlb of the suite. Health probes every
// second make a worker that pdlb cannot reach look down within the few
// seconds an attack lasts; the short grace period keeps the stop quick.
var suiteFlags = []serveFlag{
	{"--max-body-memory", strconv.Itoa(bodyMemory)},
	{"--access-log", ""},
	{"--health-check-interval-secs", "1"},
	{"--shutdown-grace-period-secs", "1"},
}

// issue19Flags are the flags issue 19's fixes add. Until a fix is merged,
// pdlb refuses its flag: the suite then runs without it, saying so, and the
// attack that needs it shows the failure the fix is for. pdlb lacking any
// other flag the suite gives fails the suite. The other new flags keep
// their defaults here, which is what the suite checks: --max-batch-size,
// --max-connections (derived from the descriptor limit) and
// --client-idle-timeout-secs.
var issue19Flags = map[string]bool{
	"--max-body-memory":           true,
	"--max-batch-size":            true,
	"--max-connections":           true,
	"--client-idle-timeout-secs":  true,
	"--admin-api-key":             true,
	"--client-stall-timeout-secs": true,
}

// serveHelp returns `pdlb serve --help`, which lists the flags pdlb knows.
func serveHelp(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("cannot read pdlb serve --help: %v\n%s", err, out)
	}
	return string(out)
}

// serveArgs returns the command-line arguments for suiteFlags and extra,
// leaving out the issue-19 flags that help does not list.
func serveArgs(t *testing.T, help string, extra []serveFlag) []string {
	t.Helper()
	var args []string
	for _, f := range append(append([]serveFlag(nil), suiteFlags...), extra...) {
		known := regexp.MustCompile(regexp.QuoteMeta(f.name) + `[= \n]`).MatchString(help)
		switch {
		case !known && issue19Flags[f.name]:
			t.Logf("pdlb lacks %s (issue 19): running without it", f.name)
			continue
		case !known:
			t.Fatalf("pdlb lacks %s, which the suite gives it", f.name)
		}
		if f.value == "" {
			args = append(args, f.name)
		} else {
			args = append(args, f.name+"="+f.value)
		}
	}
	return args
}
