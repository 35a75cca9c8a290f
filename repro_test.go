//go:build unix

package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// scripts/repro-mini-lb.sh, on fake workers, gets a 200 for the report's
// first request, prints the answer whole, and leaves nothing behind, also
// when the request fails (pdlb without its warm-up): each run used to
// leave its two logs in $TMPDIR and its answer in /tmp/pdlb-repro.json.
func TestReproMiniLBLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	const oldAnswer = "/tmp/pdlb-repro.json"
	before, beforeErr := os.Stat(oldAnswer)
	// After the runs, which go on in parallel once this function returns.
	t.Cleanup(func() {
		after, afterErr := os.Stat(oldAnswer)
		if afterErr == nil && (beforeErr != nil || !after.ModTime().Equal(before.ModTime())) {
			t.Errorf("the script wrote %s, outside its temporary folder", oldAnswer)
		}
	})
	for _, tc := range []struct {
		name, pdlbArgs, status string
		ok                     bool
	}{
		{"warmed", "", "status 200", true},
		{"no warm-up", "--no-prewarm", "status 500", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newScriptRun(t, "scripts/repro-mini-lb.sh")
			r.env = []string{"REPRO_BASE_PORT=" + strconv.Itoa(r.base), "PDLB_ARGS=" + tc.pdlbArgs}
			out, err := r.run(t, "", nil)
			if (err == nil) != tc.ok || !strings.Contains(out, tc.status+"\n") {
				t.Fatalf("got %v; want success %v and %q\n%s", err, tc.ok, tc.status, out)
			}
			_, printed, _ := strings.Cut(out, tc.status+"\n")
			var answer map[string]json.RawMessage
			if err := json.NewDecoder(strings.NewReader(printed)).Decode(&answer); err != nil {
				t.Errorf("got %v; want the answer printed whole after %q\n%s", err, tc.status, out)
			}
			r.checkCleanedUp(t)
		})
	}
}
