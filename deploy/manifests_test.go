package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the directories `kubectl apply -k` takes: pdlb, and the
// example workers.
var kustomizations = []string{"kubernetes", "kubernetes/workers"}

// typeMeta is what picks a manifest's Go type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// newObject returns a new value of the Kubernetes API type of tm, the kinds
// the manifests may hold, or an error for any other.
func newObject(tm typeMeta) (any, error) {
	switch tm {
	case typeMeta{"v1", "Namespace"}:
		return &corev1.Namespace{}, nil
	case typeMeta{"v1", "ServiceAccount"}:
		return &corev1.ServiceAccount{}, nil
	case typeMeta{"v1", "Service"}:
		return &corev1.Service{}, nil
	case typeMeta{"apps/v1", "Deployment"}:
		return &appsv1.Deployment{}, nil
	case typeMeta{"rbac.authorization.k8s.io/v1", "Role"}:
		return &rbacv1.Role{}, nil
	case typeMeta{"rbac.authorization.k8s.io/v1", "RoleBinding"}:
		return &rbacv1.RoleBinding{}, nil
	case typeMeta{"policy/v1", "PodDisruptionBudget"}:
		return &policyv1.PodDisruptionBudget{}, nil
	}
	return nil, fmt.Errorf("no Kubernetes API type known here for apiVersion %q, kind %q", tm.APIVersion, tm.Kind)
}

// decodeStrict decodes one manifest into its API type. A field the type does
// not have, a misspelled one included, and a field given twice are errors,
// as `kubectl apply --validate=strict` makes them.
func decodeStrict(doc []byte) (any, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	obj, err := newObject(tm)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// render runs kustomize on dir as `kubectl apply -k dir` would, and returns
// each resource it makes, decoded strictly.
func render(t *testing.T, dir string) []any {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %s", dir, err)
	}
	var objs []any
	for _, res := range resMap.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			t.Fatalf("kustomize %s: %s", dir, err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Errorf("%s: %s: %s", dir, res.CurId(), err)
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

// TestManifestsDecodeStrictly renders each kustomization and decodes every
// resource strictly; each manifest file is listed in its directory's
// kustomization (a file left out would be silently not applied).
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			k := readKustomization(t, dir)
			files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(k.Resources, name) {
					t.Errorf("%s is not in %s/kustomization.yaml's resources", f, dir)
				}
			}
			if objs := render(t, dir); len(objs) < len(k.Resources) {
				t.Errorf("kustomize made %d resources of %d files; want one at least per file", len(objs), len(k.Resources))
			}
		})
	}
}

// readKustomization decodes dir's kustomization.yaml strictly.
func readKustomization(t *testing.T, dir string) types.Kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %s", dir, err)
	}
	if k.Kind != types.KustomizationKind || k.APIVersion != types.KustomizationVersion {
		t.Errorf("%s/kustomization.yaml is %s %s; want %s %s", dir, k.APIVersion, k.Kind, types.KustomizationVersion, types.KustomizationKind)
	}
	return k
}

// TestDecodeStrictRefusesMistakes shows the strict decoding catches what a
// lenient one would drop silently: each case breaks one of the manifests.
func TestDecodeStrictRefusesMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new string
	}{
		{"misspelled probe", "deployment.yaml", "readinessProbe:", "readynessProbe:"},
		{"misspelled replicas", "deployment.yaml", "replicas: 2", "replica: 2"},
		{"field at the wrong level", "deployment.yaml", "      serviceAccountName: pdlb", "      serviceAccount:\n        name: pdlb"},
		{"misspelled eviction policy", "poddisruptionbudget.yaml", "unhealthyPodEvictionPolicy:", "unhealthyPodEvictionPolicies:"},
		{"misspelled verbs", "role.yaml", "verbs:", "verb:"},
		{"unknown kind", "service.yaml", "kind: Service", "kind: Servce"},
		{"field given twice", "service.yaml", "  name: pdlb\n", "  name: pdlb\n  name: other\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("kubernetes", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeStrict(data); err != nil {
				t.Fatalf("%s as written: %s", tc.file, err)
			}
			broken := bytes.Replace(data, []byte(tc.old), []byte(tc.new), 1)
			if bytes.Equal(broken, data) {
				t.Fatalf("%s has no %q to break", tc.file, tc.old)
			}
			if _, err := decodeStrict(broken); err == nil {
				t.Errorf("%s with %q for %q decoded; want an error", tc.file, tc.new, tc.old)
			}
		})
	}
}

// objectOf returns the one object of type T among objs.
func objectOf[T any](t *testing.T, objs []any) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("got %d objects of type %T; want 1", len(found), zero)
	}
	return found[0]
}

// TestRBACReadsPodsOnly: pod discovery gets get, list and watch on pods, in
// pdlb's own namespace, bound to pdlb's service account, and nothing more
// (issue 24 §2).
func TestRBACReadsPodsOnly(t *testing.T) {
	objs := render(t, "kubernetes")
	role := objectOf[*rbacv1.Role](t, objs)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("the role's rules are %+v; want %+v", role.Rules, want)
	}
	binding := objectOf[*rbacv1.RoleBinding](t, objs)
	deployment := objectOf[*appsv1.Deployment](t, objs)
	sa := objectOf[*corev1.ServiceAccount](t, objs)
	ns := deployment.Namespace
	if ns == "" || role.Namespace != ns || binding.Namespace != ns || sa.Namespace != ns {
		t.Errorf("namespaces: deployment %q, role %q, binding %q, service account %q; want one, not empty", ns, role.Namespace, binding.Namespace, sa.Namespace)
	}
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name || !slices.Equal(binding.Subjects, []rbacv1.Subject{subject}) {
		t.Errorf("the binding gives %+v to %+v; want role %s to %+v", binding.RoleRef, binding.Subjects, role.Name, subject)
	}
	if deployment.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the pods run as %q; want the service account %q", deployment.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
}

// TestWorkersAreFoundByTheSelectors: the example workers carry the labels
// pdlb's --prefill-selector and --decode-selector name, each prefill pod the
// bootstrap-port annotation with its --disaggregation-bootstrap-port, and
// they serve on --service-discovery-port.
func TestWorkersAreFoundByTheSelectors(t *testing.T) {
	args := containerArgs(t, objectOf[*appsv1.Deployment](t, render(t, "kubernetes")))
	selectors := map[string][]string{
		"prefill": flagValues(args, "--prefill-selector"),
		"decode":  flagValues(args, "--decode-selector"),
	}
	port := strings.Join(flagValues(args, "--service-discovery-port"), "")
	for _, obj := range render(t, "kubernetes/workers") {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		pod := d.Spec.Template
		role := pod.Labels["component"]
		if len(selectors[role]) == 0 {
			t.Errorf("%s: pods labelled component=%q, which no selector of pdlb names", d.Name, role)
			continue
		}
		for _, kv := range selectors[role] {
			k, v, _ := strings.Cut(kv, "=")
			if pod.Labels[k] != v {
				t.Errorf("%s: pod label %s=%q; want %q (--%s-selector)", d.Name, k, pod.Labels[k], v, role)
			}
		}
		command := strings.Join(pod.Spec.Containers[0].Command, " ")
		if !strings.Contains(command, "--port="+port) || !strings.Contains(command, "--disaggregation-mode="+role) {
			t.Errorf("%s: launched as %q; want --disaggregation-mode=%s --port=%s", d.Name, command, role, port)
		}
		annotation, annotated := pod.Annotations["sglang.ai/bootstrap-port"]
		switch {
		case role == "prefill" && (annotation == "" || !strings.Contains(command, "--disaggregation-bootstrap-port="+annotation)):
			t.Errorf("%s: bootstrap-port annotation %q, launched as %q; want them to agree", d.Name, annotation, command)
		case role == "decode" && annotated:
			t.Errorf("%s: a decode annotated with a bootstrap port", d.Name)
		}
	}
}
