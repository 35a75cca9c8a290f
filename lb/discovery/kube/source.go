package kube

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"pdlb/lb/discovery"
)

// Source watches the pods of one namespace that its selectors match and
// tells its owner how the set of workers they serve as changes. Create it
// with New; the zero value is not usable. Workers is safe for concurrent
// use; Run is called once.
type Source struct {
	cfg     Config
	watches []*roleWatch
	// poke carries "a store changed" from the informers' handlers to Run's
	// loop; one pending poke stands for any number.
	poke chan struct{}

	// set and badAnnotation are Run's goroutine's own.
	set map[discovery.Worker]bool
	// badAnnotation holds, by pod namespace/name, the bootstrap-port
	// annotation last warned about, so that it is logged once, not at
	// every change.
	badAnnotation map[string]string
	// current is the set after the last change, for Workers.
	current atomic.Pointer[[]discovery.Worker]
}

// New returns a Source for cfg, or an error naming the first field that
// cannot be used. Nothing is read from the API until Run.
func New(cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Log = cfg.Log.With().Str("component", "kubernetes").Logger()
	s := &Source{cfg: cfg, poke: make(chan struct{}, 1), set: map[discovery.Worker]bool{}, badAnnotation: map[string]string{}}
	for _, r := range roles(cfg) {
		rw, err := s.newRoleWatch(r)
		if err != nil {
			return nil, err
		}
		s.watches = append(s.watches, rw)
	}
	s.current.Store(&[]discovery.Worker{})
	return s, nil
}

// Workers returns the current set of workers, sorted by role then URL.
// The caller must not modify the slice.
func (s *Source) Workers() []discovery.Worker {
	return *s.current.Load()
}

// Failing reports whether the last list or watch of some role's pods
// failed: the API is unreachable, or refuses pdlb, and the last workers
// seen stay.
func (s *Source) Failing() bool {
	for _, rw := range s.watches {
		if rw.failing.Load() {
			return true
		}
	}
	return false
}

// Run watches the pods until ctx is done, and returns once the informers
// have stopped. It delivers the first set once every role's pods are
// listed (never, while the API cannot be reached), then a change each
// time the pods' events change the set.
func (s *Source) Run(ctx context.Context) {
	ctx = klog.NewContext(ctx, Logger(s.cfg.Log))
	var wg sync.WaitGroup
	defer wg.Wait()
	synced := make([]cache.InformerSynced, len(s.watches))
	for i, rw := range s.watches {
		wg.Go(func() { rw.informer.RunWithContext(ctx) })
		synced[i] = rw.informer.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	s.cfg.Log.Info().Str("namespace", s.cfg.Namespace).Msg("pods listed; following them")
	for {
		s.refresh()
		select {
		case <-ctx.Done():
			return
		case <-s.poke:
		}
	}
}

// refresh reads every store and delivers the difference from the set
// before, if any.
func (s *Source) refresh() {
	seen := s.serving()
	var c discovery.Change
	for w := range s.set {
		if !seen[w] {
			c.Removed = append(c.Removed, w)
			delete(s.set, w)
		}
	}
	for w := range seen {
		if !s.set[w] {
			c.Added = append(c.Added, w)
			s.set[w] = true
		}
	}
	if c.IsEmpty() {
		return
	}
	slices.SortFunc(c.Removed, compareWorkers)
	slices.SortFunc(c.Added, compareWorkers)
	current := make([]discovery.Worker, 0, len(s.set))
	for w := range s.set {
		current = append(current, w)
	}
	slices.SortFunc(current, compareWorkers)
	s.current.Store(&current)
	s.logChange(c)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(c)
	}
}

// serving returns the workers of the pods in the stores that serve. A
// pod another role's selector takes first is left to that role; a URL two
// pods give (pods on the host network) is the first's, by name, as SMG
// keeps the first (compute_desired_state). A worker whose bootstrap port
// changed is another Worker, so the change removes and adds it.
func (s *Source) serving() map[discovery.Worker]bool {
	rs := roles(s.cfg)
	var pods []*corev1.Pod
	for _, rw := range s.watches {
		for _, obj := range rw.informer.GetStore().List() {
			if pod, ok := obj.(*corev1.Pod); ok && serving(pod) {
				if role, ok := roleOf(rs, pod); ok && role == rw.role {
					pods = append(pods, pod)
				}
			}
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	seen := map[discovery.Worker]bool{}
	urls := map[string]bool{}
	bad := map[string]string{}
	for _, pod := range pods {
		role, _ := roleOf(rs, pod)
		w := workerOf(pod, role, s.cfg.Port)
		if urls[w.URL] {
			continue
		}
		urls[w.URL] = true
		if role == discovery.Prefill {
			w.BootstrapPort = s.bootstrapPort(pod, bad)
		}
		seen[w] = true
	}
	s.badAnnotation = bad
	return seen
}

// bootstrapPort returns the bootstrap port of prefill pod, 0 (learned from
// its /server_info) when its annotation is missing or not a port, which is
// logged once and recorded in bad.
func (s *Source) bootstrapPort(pod *corev1.Pod, bad map[string]string) int {
	port, raw, ok := bootstrapPort(pod, s.cfg.BootstrapPortAnnotation)
	if ok {
		return port
	}
	id := pod.Namespace + "/" + pod.Name
	bad[id] = raw
	if s.badAnnotation[id] != raw {
		s.cfg.Log.Warn().Str("pod", id).Str("annotation", s.cfg.BootstrapPortAnnotation).Str("value", raw).
			Msg("ignoring a bootstrap-port annotation that is not a port; pdlb learns the port from the prefill's /server_info")
	}
	return 0
}

// logChange logs each worker added or removed, at debug level: the caller
// logs what it applies.
func (s *Source) logChange(c discovery.Change) {
	for _, w := range c.Removed {
		s.cfg.Log.Debug().Stringer("role", w.Role).Str("url", w.URL).Msg("kubernetes worker removed")
	}
	for _, w := range c.Added {
		s.cfg.Log.Debug().Stringer("role", w.Role).Str("url", w.URL).Int("bootstrap_port", w.BootstrapPort).Msg("kubernetes worker added")
	}
}

// compareWorkers orders workers by role then URL, as discovery.Change
// lists them.
func compareWorkers(a, b discovery.Worker) int {
	return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.URL, b.URL), cmp.Compare(a.BootstrapPort, b.BootstrapPort))
}
