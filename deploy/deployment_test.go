package deploy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// containerArgs returns the args of d's pdlb container, with each $(VAR)
// its env takes from the downward API replaced as the kubelet would, by a
// stand-in value ("sglang" for the namespace).
func containerArgs(t *testing.T, d *appsv1.Deployment) []string {
	t.Helper()
	c := pdlbContainer(t, d)
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = "sglang"
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := vars[ref.FindStringSubmatch(m)[1]]
			if !ok {
				t.Errorf("arg %q names a variable the container's env does not set", a)
			}
			return v
		})
	}
	return args
}

// pdlbContainer is d's only container.
func pdlbContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%s has %d containers; want 1", d.Name, n)
	}
	return &d.Spec.Template.Spec.Containers[0]
}

// flagValues returns the values that follow flag in args ("--flag v w" or
// "--flag=v") up to the next flag.
func flagValues(args []string, flag string) []string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return []string{v}
		}
		if a != flag {
			continue
		}
		var vs []string
		for _, v := range args[i+1:] {
			if strings.HasPrefix(v, "--") {
				break
			}
			vs = append(vs, v)
		}
		return vs
	}
	return nil
}

// portNamed returns the containerPort of c named name, 0 if none.
func portNamed(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// TestDeploymentRunsPDLBSafely checks the pdlb Deployment against issue 24
// §2: two replicas; the listeners the flags open are the ports the probes,
// the Service and the scrape annotations use; the grace period outlasts the
// drain; non-root on a read-only root; resources bounded; a PDB that keeps
// one replica.
func TestDeploymentRunsPDLBSafely(t *testing.T) {
	objs := render(t, "kubernetes")
	d := objectOf[*appsv1.Deployment](t, objs)
	c := pdlbContainer(t, d)
	args := containerArgs(t, d)
	atoi := func(flag string) int {
		vs := flagValues(args, flag)
		n, err := strconv.Atoi(strings.Join(vs, ""))
		if err != nil {
			t.Fatalf("%s %q: %s", flag, vs, err)
		}
		return n
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v; want 2", d.Spec.Replicas)
	}
	http, metrics := portNamed(c, "http"), portNamed(c, "metrics")
	if int(http) != atoi("--port") || int(metrics) != atoi("--prometheus-port") || http == metrics {
		t.Errorf("ports http %d, metrics %d; want --port's and --prometheus-port's, apart", http, metrics)
	}
	for _, p := range []struct {
		name, path, port string
		probe            *corev1.Probe
	}{
		// Liveness outside the client connection budget (the admin
		// listener); readiness on the clients' port.
		{"liveness", "/liveness", "metrics", c.LivenessProbe},
		{"readiness", "/readiness", "http", c.ReadinessProbe},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != intstr.FromString(p.port) {
			t.Errorf("%s probe %+v; want GET %s on the %s port", p.name, p.probe, p.path, p.port)
		}
	}
	annotations := d.Spec.Template.Annotations
	if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/port"] != strconv.Itoa(int(metrics)) || annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v; want scrape, port %d and path /metrics", annotations, metrics)
	}
	svc := objectOf[*corev1.Service](t, objs)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("service ports %+v; want the http port alone (the metrics port serves operator routes)", svc.Spec.Ports)
	}
	checkGrace(t, d, atoi("--shutdown-grace-period-secs"), atoi("--drain-timeout-secs"))
	checkConfinement(t, d)
	pdb := objectOf[*policyv1.PodDisruptionBudget](t, objs)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.Selector == nil ||
		pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != d.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("PDB %+v; want at least one of the pdlb pods kept", pdb.Spec)
	}
}

// checkGrace: the kubelet's SIGKILL comes after preStop's sleep and pdlb's
// whole drain (--shutdown-grace-period-secs), and a worker's drain fits in
// it too.
func checkGrace(t *testing.T, d *appsv1.Deployment, shutdown, drain int) {
	t.Helper()
	c := pdlbContainer(t, d)
	var sleep int64
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		sleep = c.Lifecycle.PreStop.Sleep.Seconds
	}
	var grace int64 // the API's default is 30 s, shorter than any drain here
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if grace <= sleep+int64(shutdown) || drain > shutdown {
		t.Errorf("terminationGracePeriodSeconds %d, preStop sleep %d, --shutdown-grace-period-secs %d, --drain-timeout-secs %d; want the grace longer than the sleep and the shutdown drain, the worker drain within it",
			grace, sleep, shutdown, drain)
	}
}

// checkConfinement: non-root, read-only root filesystem, no privilege, no
// capabilities, and requests and limits for CPU and memory.
func checkConfinement(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod, c := d.Spec.Template.Spec.SecurityContext, pdlbContainer(t, d)
	sc := c.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		t.Errorf("pod security context %+v; want runAsNonRoot and a non-zero runAsUser", pod)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context %+v; want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || lim.Cmp(req) < 0 {
			t.Errorf("%s request %s, limit %s; want both, the limit at least the request", r, req.String(), lim.String())
		}
	}
}
