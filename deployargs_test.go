package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// deploymentArgs returns the args of the pdlb container of
// deploy/kubernetes/deployment.yaml, with $(POD_NAMESPACE) as the kubelet
// would expand it.
func deploymentArgs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("deploy/kubernetes/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatalf("deployment.yaml: %s", err)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("deployment.yaml has %d containers; want 1", n)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 0 {
		t.Errorf("the container's command is %q; want none, so that the image's entrypoint (pdlb) runs", c.Command)
	}
	ref := regexp.MustCompile(`\$\((\w+)\)`)
	args := slices.Clone(c.Args)
	for i, a := range args {
		args[i] = ref.ReplaceAllStringFunc(a, func(m string) string {
			if m != "$(POD_NAMESPACE)" {
				t.Errorf("arg %q: want no variable but $(POD_NAMESPACE)", a)
			}
			return "sglang"
		})
	}
	return args
}

// discoveryFlags are sglang_router's pod discovery flags (issue 24 §1),
// which serve drops with a warning until it implements them.
var discoveryFlags = []string{"--service-discovery", "--prefill-selector", "--decode-selector",
	"--service-discovery-namespace", "--service-discovery-port"}

// TestDeploymentArgsParse runs the Deployment's args through pdlb's own
// command line, as the image's entrypoint gets them: they parse, they set
// what the Deployment relies on, and the only flags dropped are the pod
// discovery ones. Once serve implements them, none may be dropped: then
// ignored must be empty, and the parsed selectors checked here.
func TestDeploymentArgsParse(t *testing.T) {
	args := deploymentArgs(t)
	c, ignored, err := parse(t, args...)
	if err != nil {
		t.Fatalf("pdlb refuses the Deployment's args %q: %s", args, err)
	}
	for _, f := range ignored {
		if !slices.Contains(discoveryFlags, f) {
			t.Errorf("pdlb drops %s from the Deployment's args; want only the pod discovery flags dropped", f)
		}
	}
	s := c.Serve
	if s.PrefillPolicy != "prefix_hash" || s.Port != 8000 || s.PrometheusPort != 29000 || s.Host != "0.0.0.0" {
		t.Errorf("parsed --prefill-policy %q, --host %q, --port %d, --prometheus-port %d; want prefix_hash, 0.0.0.0, 8000, 29000",
			s.PrefillPolicy, s.Host, s.Port, s.PrometheusPort)
	}
	if s.ShutdownGracePeriodSecs != 180 || s.DrainTimeoutSecs != 120 {
		t.Errorf("parsed --shutdown-grace-period-secs %d, --drain-timeout-secs %d; want 180 and 120", s.ShutdownGracePeriodSecs, s.DrainTimeoutSecs)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("the Deployment's flags do not validate: %s", err)
	}
	if got := strings.Join(args, " "); !strings.Contains(got, "--service-discovery-namespace sglang") {
		t.Errorf("args %q; want the namespace from the downward API", got)
	}
}
