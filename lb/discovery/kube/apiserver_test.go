package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"pdlb/lb/discovery"
)

// apiServer is a fake Kubernetes API server on 127.0.0.1 serving the pods
// of namespace ns the way kube-apiserver does, for Connect's REST client:
// a list; a watch; and, when streams is set, a watch-list (a watch with
// sendInitialEvents=true: the pods as ADDED events, then a bookmark marked
// k8s.io/initial-events-end), else the refusal of one (422 Invalid), as a
// server whose WatchList feature is off answers.
type apiServer struct {
	t       *testing.T
	streams bool
	pods    []*corev1.Pod    // there from the start
	later   chan *corev1.Pod // added while the test runs, to every watch
	lists   atomic.Int32     // lists served
	wlists  atomic.Int32     // watch-lists asked for
	badSel  atomic.Pointer[string]
}

const apiSelector = "app=sglang,component=decode"

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.URL.Path != "/api/v1/namespaces/"+ns+"/pods" {
		http.NotFound(w, r)
		return
	}
	if sel := q.Get("labelSelector"); sel != apiSelector {
		a.badSel.Store(&sel)
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		a.lists.Add(1)
		a.write(w, &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: derefPods(a.pods)})
		return
	}
	if q.Get("sendInitialEvents") == "true" {
		a.wlists.Add(1)
		if !a.streams {
			w.WriteHeader(http.StatusUnprocessableEntity)
			a.write(w, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity,
				Message: "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"})
			return
		}
		for _, p := range a.pods {
			a.event(w, "ADDED", p)
		}
		a.event(w, "BOOKMARK", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case p := <-a.later:
			a.event(w, "ADDED", p)
		case <-r.Context().Done():
			return
		}
	}
}

func (a *apiServer) write(w http.ResponseWriter, obj any) {
	if err := json.NewEncoder(w).Encode(obj); err != nil {
		a.t.Error(err)
	}
}

// event writes one watch event of p, as the API server frames them.
func (a *apiServer) event(w http.ResponseWriter, typ string, p *corev1.Pod) {
	p = p.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	raw, err := json.Marshal(p)
	if err != nil {
		a.t.Fatal(err)
	}
	a.write(w, &metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}})
	w.(http.Flusher).Flush()
}

func derefPods(pods []*corev1.Pod) []corev1.Pod {
	var items []corev1.Pod
	for _, p := range pods {
		items = append(items, *p)
	}
	return items
}

// Connect's REST client, with its scheme of core/v1 alone, follows pods on
// a server that streams watch-lists (client-go's default, on by default)
// and on one that refuses them, where the informer lists then watches;
// the refusal is no API failure. The label selector reaches the server.
func TestRESTClientFollowsPods(t *testing.T) {
	for _, streams := range []bool{true, false} {
		t.Run(map[bool]string{true: "watch-list", false: "list then watch"}[streams], func(t *testing.T) {
			a := &apiServer{t: t, streams: streams, later: make(chan *corev1.Pod),
				pods: []*corev1.Pod{pod("decode-0", "10.0.0.1", "app=sglang component=decode")}}
			srv := httptest.NewServer(a)
			t.Cleanup(srv.Close)
			pods, _, err := connect(&rest.Config{Host: srv.URL}, ns)
			if err != nil {
				t.Fatal(err)
			}
			changes := make(chan discovery.Change, 8)
			errs := metrics.NewSet().NewCounter("errors_total")
			src, err := New(Config{Pods: pods, Namespace: ns, Decode: map[string]string{"app": "sglang", "component": "decode"},
				OnChange: func(c discovery.Change) { changes <- c }, Errors: errs, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				src.Run(ctx)
			}()
			t.Cleanup(func() { cancel(); <-done })

			next := func(what string, want discovery.Worker) {
				t.Helper()
				select {
				case c := <-changes:
					if len(c.Removed) != 0 || len(c.Added) != 1 || c.Added[0] != want {
						t.Fatalf("%s: got removed %v, added %v; want %v added", what, c.Removed, c.Added, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no change within 10 s (lists %d, watch-lists %d, errors %d)", what, a.lists.Load(), a.wlists.Load(), errs.Get())
				}
			}
			next("the pod there at start", decode("http://10.0.0.1:80"))
			a.later <- pod("decode-1", "10.0.0.2", "app=sglang component=decode")
			next("a pod added", decode("http://10.0.0.2:80"))

			if got := a.wlists.Load(); got != 1 {
				t.Errorf("watch-lists asked for: got %d; want 1", got)
			}
			if got, want := a.lists.Load(), map[bool]int32{true: 0, false: 1}[streams]; got != want {
				t.Errorf("lists: got %d; want %d", got, want)
			}
			if sel := a.badSel.Load(); sel != nil {
				t.Errorf("label selector sent: got %q; want %q", *sel, apiSelector)
			}
			if errs.Get() != 0 || src.Failing() {
				t.Errorf("API failures counted: %d, failing %v; want none", errs.Get(), src.Failing())
			}
		})
	}
}
