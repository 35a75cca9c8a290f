package kube

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"pdlb/lb/discovery"
)

// A pod joins once Running and Ready with an IP, and leaves when it stops
// being ready, starts terminating or is deleted; a new pod IP is another
// worker (issue 24 §1).
func TestPodsJoinAndLeave(t *testing.T) {
	c := newCluster(t, Config{Decode: map[string]string{"app": "sglang", "component": "decode"}, Port: 30000},
		pod("d1", "10.0.0.1", "app=sglang component=decode"),
		pod("d2", "", "app=sglang component=decode"), // scheduled, no IP yet
		pod("p1", "10.0.0.9", "app=sglang component=prefill"))
	c.run()
	c.expect("listed", nil, []discovery.Worker{decode("http://10.0.0.1:30000")})

	c.update("d2", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2"; setReady(false)(p) })
	c.update("d2", setReady(true))
	c.expect("d2 ready", nil, []discovery.Worker{decode("http://10.0.0.2:30000")})

	c.update("d1", setReady(false))
	c.expect("d1 not ready", []discovery.Worker{decode("http://10.0.0.1:30000")}, nil)
	c.update("d1", setReady(true))
	c.expect("d1 ready again", nil, []discovery.Worker{decode("http://10.0.0.1:30000")})

	c.update("d1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	c.expect("d1 failed", []discovery.Worker{decode("http://10.0.0.1:30000")}, nil)
	c.update("d1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	c.expect("d1 running again", nil, []discovery.Worker{decode("http://10.0.0.1:30000")})

	c.update("d1", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now })
	c.expect("d1 terminating", []discovery.Worker{decode("http://10.0.0.1:30000")}, nil)

	c.update("d2", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.3" })
	c.expect("d2 moved", []discovery.Worker{decode("http://10.0.0.2:30000")}, []discovery.Worker{decode("http://10.0.0.3:30000")})

	c.remove("d2")
	c.expect("d2 deleted", []discovery.Worker{decode("http://10.0.0.3:30000")}, nil)
	if got := c.src.Workers(); len(got) != 0 {
		t.Fatalf("after every pod left: got %v; want none", got)
	}
}

// A prefill's bootstrap port is its annotation's; one that is not a port
// is logged, once, and the prefill joins without (its /server_info tells
// it); a decode's annotation is not read. A new port is a new worker.
func TestBootstrapPortAnnotation(t *testing.T) {
	const ann = "sglang.ai/bootstrap-port"
	c := newCluster(t, Config{Prefill: map[string]string{"component": "prefill"}, Decode: map[string]string{"component": "decode"}},
		pod("p1", "10.0.0.1", "component=prefill", ann, "8998"),
		pod("p2", "10.0.0.2", "component=prefill", ann, "port-8998"),
		pod("p3", "10.0.0.3", "component=prefill"),
		pod("d1", "10.0.0.4", "component=decode", ann, "8998"))
	c.run()
	c.expect("listed", nil, []discovery.Worker{
		prefill("http://10.0.0.1:80", 8998), prefill("http://10.0.0.2:80", 0), prefill("http://10.0.0.3:80", 0),
		decode("http://10.0.0.4:80")})
	if n := strings.Count(c.log.String(), "ignoring a bootstrap-port annotation"); n != 1 || !strings.Contains(c.log.String(), `"value":"port-8998"`) {
		t.Fatalf("bad annotation: got %d warnings in\n%s\nwant 1 naming port-8998", n, c.log)
	}

	c.update("p1", func(p *corev1.Pod) { p.Annotations[ann] = "9000" })
	c.expect("p1's port changed", []discovery.Worker{prefill("http://10.0.0.1:80", 8998)}, []discovery.Worker{prefill("http://10.0.0.1:80", 9000)})
	if n := strings.Count(c.log.String(), "ignoring a bootstrap-port annotation"); n != 1 {
		t.Fatalf("the bad annotation warned %d times; want once", n)
	}
}

// Two roles are watched at once; a pod two selectors match is the first
// role's (prefill before decode before fallback); a selector matching no
// pod leaves its role empty, and a pod no selector matches is not taken.
func TestRolesAndSelectors(t *testing.T) {
	c := newCluster(t, Config{
		Prefill:  map[string]string{"app": "sglang", "component": "prefill"},
		Decode:   map[string]string{"app": "nothing"},
		Fallback: map[string]string{"app": "sglang"},
	},
		pod("p1", "10.0.0.1", "app=sglang component=prefill"),
		pod("r1", "10.0.0.2", "app=sglang"),
		pod("x1", "10.0.0.3", "app=other"))
	c.run()
	c.expect("listed", nil, []discovery.Worker{prefill("http://10.0.0.1:80", 0), fallback("http://10.0.0.2:80")})

	c.create(pod("x2", "10.0.0.4", "app=other component=decode"))
	c.create(pod("r2", "10.0.0.5", "app=sglang tier=x"))
	c.expect("a fallback created after a pod no selector matches", nil, []discovery.Worker{fallback("http://10.0.0.5:80")})
}

// When the API cannot be reached, lists and watches failing, the workers
// last seen stay, the failure logged and counted; when it answers again,
// the pods are listed anew and what changed meanwhile applies (issue 24
// §1: the last good set is kept).
func TestAPIUnreachableKeepsWorkers(t *testing.T) {
	errors := metrics.NewSet().NewCounter("errors_total")
	c := newCluster(t, Config{Decode: map[string]string{"component": "decode"}, Errors: errors},
		pod("d1", "10.0.0.1", "component=decode"), pod("d2", "10.0.0.2", "component=decode"))
	var down atomic.Bool
	var watches atomic.Int32
	firstWatch := make(chan *watch.RaceFreeFakeWatcher, 1)
	c.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errConnRefused
		}
		return false, nil, nil
	})
	c.cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, errConnRefused
		}
		if watches.Add(1) > 1 {
			return false, nil, nil // the tracker's own watch
		}
		w := watch.NewRaceFreeFake()
		firstWatch <- w
		return true, w, nil
	})
	c.run()
	c.expect("listed", nil, []discovery.Worker{decode("http://10.0.0.1:80"), decode("http://10.0.0.2:80")})

	down.Store(true)
	c.remove("d2") // unseen: the informer's watch is ours, not the tracker's
	(<-firstWatch).Stop()
	c.log.waitFor(t, "cannot list or watch pods")
	if got := c.src.Workers(); len(got) != 2 || !c.src.Failing() || errors.Get() == 0 {
		t.Fatalf("API down: got workers %v, failing %t, %d errors; want both workers kept, failing, errors counted", got, c.src.Failing(), errors.Get())
	}
	select {
	case ch := <-c.changes:
		t.Fatalf("API down: got change %+v; want none", ch)
	default:
	}

	down.Store(false)
	c.expect("API back", []discovery.Worker{decode("http://10.0.0.2:80")}, nil)
	c.log.waitFor(t, "kubernetes API answers again") // once the watch after the list starts
	if c.src.Failing() {
		t.Fatal("API back: still failing")
	}
}

var errConnRefused = errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
