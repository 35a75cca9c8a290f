package serve

import (
	"bytes"
	"testing"
)

// A removed flag is neither one pdlb implements nor one sglang_router still
// has: those run. (TestRemovedFlagsNameTheirReplacement, main's, checks
// what pdlb says of one.)
func TestRemovedFlagsAreNoLongerFlags(t *testing.T) {
	var c root
	parser, err := newParser(&c, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	serve, router := serveFlagNames(parser), routerFlags()
	for name := range removedFlags() {
		if _, ok := router[name]; ok || serve[name] != nil {
			t.Errorf("--%s is in removedFlags, and a flag of serve or of current sglang_router", name)
		}
	}
}
