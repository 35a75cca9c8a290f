package main

import (
	"os"
	"regexp"
	"slices"
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

// TestDeploymentArgsParse runs the Deployment's args through pdlb's own
// command line, as the image's entrypoint gets them: they parse, none is
// dropped, and they set what the Deployment relies on, the pod discovery
// of the worker manifests (deploy/kubernetes/workers) included.
func TestDeploymentArgsParse(t *testing.T) {
	args := deploymentArgs(t)
	c, ignored, err := parse(t, args...)
	if err != nil {
		t.Fatalf("pdlb refuses the Deployment's args %q: %s", args, err)
	}
	if len(ignored) > 0 {
		t.Errorf("pdlb drops %q from the Deployment's args; want every flag taken", ignored)
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
	if !s.ServiceDiscovery || s.ServiceDiscoveryNamespace != "sglang" || s.ServiceDiscoveryPort != 30000 ||
		!slices.Equal(s.PrefillSelector, []string{"app=sglang", "component=prefill"}) ||
		!slices.Equal(s.DecodeSelector, []string{"app=sglang", "component=decode"}) {
		t.Errorf("parsed discovery: on %v, namespace %q, port %d, prefill %q, decode %q; want the pods of "+
			"deploy/kubernetes/workers (app=sglang, component=prefill or decode, port 30000) in the downward API's namespace",
			s.ServiceDiscovery, s.ServiceDiscoveryNamespace, s.ServiceDiscoveryPort, s.PrefillSelector, s.DecodeSelector)
	}
}
