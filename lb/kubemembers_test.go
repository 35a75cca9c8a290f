package lb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"pdlb/bench/fake"
	"pdlb/lb/discovery/kube/kubetest"
)

// readyPod is a decode pod, Running and Ready at ip.
func readyPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: map[string]string{"app": "sglang", "component": "decode"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// pdlb started with no decode but a selector serves once a pod it selects
// is ready; the decode of a pod deleted is drained: its stream in flight
// finishes, and no new request reaches it (issue 24 §1). Not in a synctest
// bubble: client-go's informers wait on real tickers.
func TestDecodesFromKubernetes(t *testing.T) {
	h := newHarness(t)
	h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
	d1 := h.fake("10.0.0.1:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second, TokenDelay: 20 * time.Millisecond})
	cs := fakeclient.NewClientset()
	cfg := defaultConfig()
	cfg.Decode = nil
	cfg.Kubernetes = KubernetesConfig{Pods: kubetest.Pods(cs), Namespace: "llm", Port: 30010,
		Decode: []string{"app=sglang component=decode"}}
	srv := h.start(cfg)

	if r := h.do(fasthttp.MethodGet, "/readiness", ""); r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), `"a ready decode"`) {
		t.Errorf("/readiness before a pod: got %d %s; want 503 naming the decode", r.status, r.body)
	}
	pods := cs.CoreV1().Pods("llm")
	p := readyPod("decode-0", "10.0.0.1")
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.UpdateStatus(context.Background(), readyPod("decode-0", "10.0.0.1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ready pod's decode", func() bool { return len(srv.decodes.backends()) == 1 })
	if r := h.post("/generate", `{"text": "a", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusOK {
		t.Fatalf("once the pod is ready: got %d %s; want 200", r.status, r.body)
	}
	if r := h.do(fasthttp.MethodGet, "/readiness", ""); r.status != fasthttp.StatusOK {
		t.Errorf("/readiness once the pod is ready: got %d %s; want 200", r.status, r.body)
	}
	st := h.openStream("/generate", `{"text": "s", "stream": true, "sampling_params": {"max_new_tokens": 20}}`)

	if err := pods.Delete(context.Background(), "decode-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod's decode to leave", func() bool { return len(srv.decodes.backends()) == 0 })
	served := d1.Stats().GenerateRequests
	if r := h.post("/generate", `{"text": "b", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusServiceUnavailable {
		t.Errorf("once the pod is deleted: got %d %s; want 503", r.status, r.body)
	}
	if got := d1.Stats().GenerateRequests; got != served {
		t.Errorf("the deleted pod's decode got %d requests after it left; want none", got-served)
	}
	if evs := st.rest(); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "[DONE]") {
		t.Errorf("the stream on the deleted pod's decode: got %q; want it whole, up to [DONE]", evs)
	}
	if !h.hasSeries(`pdlb_kubernetes_workers_changed_total{change="added"} 1`) ||
		!h.hasSeries(`pdlb_kubernetes_workers_changed_total{change="removed"} 1`) ||
		!h.hasSeries(`pdlb_kubernetes_api_failing 0`) {
		t.Error("the changes applied are not counted")
	}
}

// A decode given on the command line whose URL a ready pod gives too stays
// when the pod is deleted: a worker leaves when no source gives it any
// more (issue 23 §1), Kubernetes being one source among others.
func TestCommandLineDecodeStaysWhenItsPodLeaves(t *testing.T) {
	h := newHarness(t)
	h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
	h.fake("10.0.0.1:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})
	cs := fakeclient.NewClientset()
	cfg := defaultConfig()
	const d0 = "http://10.0.0.1:30010"
	cfg.Decode = []string{d0}
	cfg.Kubernetes = KubernetesConfig{Pods: kubetest.Pods(cs), Namespace: "llm", Port: 30010,
		Decode: []string{"app=sglang component=decode"}}
	srv := h.start(cfg)
	b := srv.decodes.find(d0)
	if b == nil {
		t.Fatal("the decode given on the command line is not a member")
	}

	pods := cs.CoreV1().Pods("llm")
	if _, err := pods.Create(context.Background(), readyPod("decode-0", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to give the decode too", func() bool { return b.givenBy() == sourceStart|sourceKubernetes })
	if err := pods.Delete(context.Background(), "decode-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod to stop giving the decode", func() bool { return b.givenBy() == sourceStart })
	if srv.decodes.find(d0) != b || b.leaving.Load() {
		t.Fatal("the decode given on the command line left with its pod")
	}
	if r := h.post("/generate", `{"text": "a", "sampling_params": {"max_new_tokens": 1}}`); r.status != fasthttp.StatusOK {
		t.Errorf("once the pod is deleted: got %d %s; want 200 through the decode kept", r.status, r.body)
	}
	if !h.hasSeries(`pdlb_kubernetes_workers_changed_total{change="removed"} 0`) ||
		!h.hasSeries(`pdlb_kubernetes_workers_changed_total{change="failed"} 0`) {
		t.Error("a decode the command line keeps is counted as removed, or as failed")
	}
}

// While the Kubernetes API refuses to list pods, /readiness says so beside
// the pools it leaves empty: an operator is pointed at the API (RBAC, the
// network), not at the workers.
func TestReadinessNamesAFailingKubernetesAPI(t *testing.T) {
	h := newHarness(t)
	h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill})
	cs := fakeclient.NewClientset()
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New(`pods is forbidden: User "system:serviceaccount:llm:pdlb" cannot list resource "pods"`)
	})
	cfg := defaultConfig()
	cfg.Decode = nil
	cfg.Kubernetes = KubernetesConfig{Pods: kubetest.Pods(cs), Namespace: "llm", Port: 30010,
		Decode: []string{"app=sglang component=decode"}}
	srv := h.start(cfg)
	waitFor(t, "the pods' list to fail", srv.kube.source.Failing)
	r := h.do(fasthttp.MethodGet, "/readiness", "")
	if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "the Kubernetes API") {
		t.Errorf("/readiness with the pods' list refused: got %d %s; want 503 naming the Kubernetes API", r.status, r.body)
	}
}
