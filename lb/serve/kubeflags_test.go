package serve

import (
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	fakeclient "k8s.io/client-go/kubernetes/fake"

	"pdlb/lb"
	"pdlb/lb/discovery/kube/kubetest"
)

// sglang_router's service-discovery line reaches lb.Config, selectors as
// argparse reads them (several values after the flag, or one value of
// several pairs, as OME passes them); pdlb then needs no --prefill nor
// --decode (issue 24 §1).
func TestParseKubernetesFlags(t *testing.T) {
	c, ignored, err := parse(t, "--service-discovery", "--prefill-selector", "app=sglang", "component=prefill",
		"--decode-selector", "app=sglang component=decode", "--selector", "app=sglang-agg",
		"--service-discovery-namespace", "llm", "--service-discovery-port", "30000", "--port", "8000")
	if err != nil {
		t.Fatal(err)
	}
	if len(ignored) != 0 || c.Serve.Port != 8000 {
		t.Fatalf("got ignored %q, port %d; want none ignored, 8000", ignored, c.Serve.Port)
	}
	cfg, _ := c.Serve.config()
	want := lb.KubernetesConfig{
		Namespace:               "llm",
		Prefill:                 []string{"app=sglang", "component=prefill"},
		Decode:                  []string{"app=sglang component=decode"},
		Fallback:                []string{"app=sglang-agg"},
		Port:                    30000,
		BootstrapPortAnnotation: "sglang.ai/bootstrap-port",
	}
	if !reflect.DeepEqual(cfg.Kubernetes, want) {
		t.Fatalf("got %+v; want %+v", cfg.Kubernetes, want)
	}
	cfg.Kubernetes.Pods = kubetest.Pods(fakeclient.NewClientset())
	if _, err := lb.New(cfg, zerolog.Nop()); err != nil {
		t.Fatalf("selectors without --prefill and --decode: %s; want pdlb to start with both pools empty", err)
	}

	t.Setenv("PDLB_DECODE_SELECTOR", "app=sglang,component=decode")
	c, _, err = parse(t, "--service-discovery", "--prefill", "http://p:1", "--bootstrap-port-annotation", "example.com/bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = c.Serve.config()
	if got := cfg.Kubernetes; !reflect.DeepEqual(got.Decode, []string{"app=sglang,component=decode"}) ||
		got.Port != 80 || got.Namespace != "" || got.BootstrapPortAnnotation != "example.com/bootstrap" {
		t.Fatalf("from the environment, with defaults: got %+v", got)
	}
}

// A selector without --service-discovery, --service-discovery without a
// selector, and a bad value are usage errors naming the flag.
func TestParseBadKubernetesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--decode-selector", "app=x"}, "--decode-selector needs --service-discovery"},
		{[]string{"--selector", "app=x"}, "--selector needs --service-discovery"},
		{[]string{"--service-discovery"}, "--service-discovery needs pods to follow"},
		{[]string{"--service-discovery-namespace", "llm"}, "--service-discovery-namespace needs --service-discovery"},
		{[]string{"--kubeconfig", "/tmp/kubeconfig"}, "--kubeconfig needs --service-discovery"},
		{[]string{"--service-discovery", "--decode-selector", "app"}, `--decode-selector: "app" is not KEY=VALUE`},
		{[]string{"--service-discovery", "--decode-selector", "app=a/b"}, "--decode-selector: label value"},
		{[]string{"--service-discovery", "--prefill-selector", "app_=x"}, "--prefill-selector: label key"},
		{[]string{"--service-discovery", "--selector", "app=x app=y"}, `--selector: label "app" given twice`},
		{[]string{"--service-discovery", "--decode-selector", "app=x", "--service-discovery-port", "0"}, "--service-discovery-port"},
		{[]string{"--service-discovery", "--decode-selector", "app=x", "--service-discovery-namespace", "LLM"}, "--service-discovery-namespace"},
		{[]string{"--service-discovery", "--decode-selector", "app=x", "--bootstrap-port-annotation", "a b"}, "--bootstrap-port-annotation"},
	} {
		_, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode", "http://d:1"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v; want an error with %q", tc.args, err, tc.want)
		}
	}
}

// $KUBECONFIG in the environment, as kubectl users have it, is no
// --kubeconfig: pdlb without --service-discovery starts.
func TestKubeconfigEnvironmentIsNoFlag(t *testing.T) {
	t.Setenv("KUBECONFIG", "/tmp/kubeconfig")
	if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1"); err != nil {
		t.Fatalf("with $KUBECONFIG set: %s; want no error", err)
	}
}
