package kube

import (
	"maps"
	"strings"
	"testing"
)

// ParseSelector reads sglang_router's selector values: pairs as separate
// arguments, in one argument separated by spaces (OME) or commas
// (Kubernetes' own syntax, and PDLB_*_SELECTOR variables).
func TestParseSelector(t *testing.T) {
	f := func(items []string, want map[string]string) {
		t.Helper()
		got, err := ParseSelector(items)
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("ParseSelector(%q): got %v, %v; want %v", items, got, err, want)
		}
	}
	f([]string{"app=sglang", "component=decode"}, map[string]string{"app": "sglang", "component": "decode"})
	f([]string{"app=sglang component=decode"}, map[string]string{"app": "sglang", "component": "decode"})
	f([]string{"app=sglang,component=decode", "app=sglang"}, map[string]string{"app": "sglang", "component": "decode"})
	f([]string{"sglang.ai/role=prefill", "tier="}, map[string]string{"sglang.ai/role": "prefill", "tier": ""})
	f(nil, map[string]string{})

	bad := func(item, want string) {
		t.Helper()
		if _, err := ParseSelector([]string{item}); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ParseSelector(%q): got %v; want an error with %q", item, err, want)
		}
	}
	bad("app", "not KEY=VALUE")
	bad("app!=x", "label key")
	bad("app=worker=extra", "label value")
	bad("app=a app=b", `given twice, as "a" and "b"`)
	bad("Bad Key=x", "not KEY=VALUE")
	bad(" , ", "no KEY=VALUE pair")
	bad("", "no KEY=VALUE pair")
}
