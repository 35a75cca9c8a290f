package kube

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"pdlb/lb/discovery"
	"pdlb/lb/discovery/kube/kubetest"
)

// The harness runs a Source on client-go's fake clientset. Informers
// deliver events on their own goroutines, so tests wait on the changes the
// Source hands OnChange (and on its log lines), never on time; a
// synctest bubble would not do, client-go's informers starting goroutines
// (the reflector's backoff, its clock) that are not the test's to
// stop, and its WaitForCacheSync polling on a real ticker.

const ns = "llm"

// cluster is a fake API server's pods and a Source running on them.
type cluster struct {
	t       *testing.T
	cs      *fake.Clientset
	src     *Source
	changes chan discovery.Change
	log     *logLines
}

// newCluster returns a cluster whose Source has cfg (its Pods, Namespace,
// OnChange and Log set here), not yet running.
func newCluster(t *testing.T, cfg Config, pods ...*corev1.Pod) *cluster {
	t.Helper()
	c := &cluster{t: t, cs: fake.NewClientset(), changes: make(chan discovery.Change, 64), log: newLogLines()}
	for _, p := range pods {
		c.create(p)
	}
	cfg.Pods, cfg.Namespace = kubetest.Pods(c.cs), ns
	cfg.OnChange = func(ch discovery.Change) { c.changes <- ch }
	cfg.Log = zerolog.New(c.log)
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.src = src
	return c
}

// run runs the Source until the test ends, and waits for it to stop.
func (c *cluster) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.src.Run(ctx)
	}()
	c.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// next returns the next change, failing the test after 10 s without one.
func (c *cluster) next() discovery.Change {
	c.t.Helper()
	select {
	case ch := <-c.changes:
		return ch
	case <-time.After(10 * time.Second):
		c.t.Fatal("no change within 10 s")
		return discovery.Change{}
	}
}

// expect fails the test unless the next change removes and adds the
// workers given (URL, or URL@BOOTSTRAPPORT, each role's), in order.
func (c *cluster) expect(what string, removed, added []discovery.Worker) {
	c.t.Helper()
	got := c.next()
	if !sameWorkers(got.Removed, removed) || !sameWorkers(got.Added, added) {
		c.t.Fatalf("%s: got removed %v, added %v; want removed %v, added %v", what, got.Removed, got.Added, removed, added)
	}
}

func sameWorkers(a, b []discovery.Worker) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (c *cluster) create(p *corev1.Pod) {
	c.t.Helper()
	if _, err := c.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// update replaces the pod named name with what edit makes of it.
func (c *cluster) update(name string, edit func(*corev1.Pod)) {
	c.t.Helper()
	pods := c.cs.CoreV1().Pods(ns)
	p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	edit(p)
	if _, err := pods.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) remove(name string) {
	c.t.Helper()
	if err := c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// pod returns a pod of labels "k=v ..." that is Running and Ready at ip.
func pod(name, ip, labels string, annotations ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: map[string]string{}, Annotations: map[string]string{}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, kv := range strings.Fields(labels) {
		k, v, _ := strings.Cut(kv, "=")
		p.Labels[k] = v
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		p.Annotations[annotations[i]] = annotations[i+1]
	}
	return p
}

// setReady sets p's Ready condition.
func setReady(ready bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		if ready {
			p.Status.Conditions[0].Status = corev1.ConditionTrue
		}
	}
}

func decode(url string) discovery.Worker { return discovery.Worker{Role: discovery.Decode, URL: url} }
func prefill(url string, port int) discovery.Worker {
	return discovery.Worker{Role: discovery.Prefill, URL: url, BootstrapPort: port}
}
func fallback(url string) discovery.Worker {
	return discovery.Worker{Role: discovery.Fallback, URL: url}
}

// logLines is a log that a test can read and wait on, line by line.
type logLines struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLogLines() *logLines { return &logLines{lines: make(chan string, 256)} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	select {
	case l.lines <- string(p):
	default: // the test reads String instead
	}
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor returns the first line, from now on, holding s; it fails the
// test after 10 s without one.
func (l *logLines) waitFor(t *testing.T, s string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(line, s) {
				return line
			}
		case <-deadline:
			t.Fatalf("no log line with %q within 10 s; log:\n%s", s, l.String())
			return ""
		}
	}
}
