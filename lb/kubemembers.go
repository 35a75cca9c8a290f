package lb

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/lb/discovery"
	"pdlb/lb/discovery/kube"
)

// Workers found in Kubernetes (issue 24 §1): package kube watches the pods
// that KubernetesConfig's selectors match and tells the Server how the set
// of workers they serve as changes; the Server applies each change through
// its one membership path (membership.go), removals first, as it does
// DNS's (discoverymembers.go): a pod that becomes ready joins, health-checked
// and warmed, and one that stops being ready, starts terminating or is
// deleted is drained.

// KubernetesConfig names the pods pdlb follows as workers, beside (or
// instead of) the ones Config lists. A role given a selector may be given
// no worker in Config: pdlb then starts with that pool empty, /readiness
// answering 503 naming what is missing until a pod fills it.
type KubernetesConfig struct {
	// Pods gives the pods to list and watch: kube.Connect's, on the API
	// server, or in tests kubetest.Pods on the fake clientset. Required
	// when a selector is given; the Server never builds one.
	Pods kube.PodsFunc
	// Namespace is the namespace watched (--service-discovery-namespace).
	// Required when a selector is given: kube.Connect says the default.
	Namespace string
	// Prefill, Decode and Fallback are each role's label selector, items
	// of KEY=VALUE pairs (--prefill-selector, --decode-selector,
	// --selector; kube.ParseSelector reads them). Empty: none of that role.
	Prefill, Decode, Fallback []string
	// Port is the workers' port on their pod IP; zero means 80
	// (--service-discovery-port).
	Port int
	// BootstrapPortAnnotation is the pod annotation giving a prefill's
	// bootstrap port; empty means sglang.ai/bootstrap-port
	// (--bootstrap-port-annotation).
	BootstrapPortAnnotation string
}

// selects reports whether c names any pod to follow.
func (c *KubernetesConfig) selects() bool {
	return len(c.Prefill)+len(c.Decode)+len(c.Fallback) > 0
}

// source returns the kube configuration of c, with its changes going to
// onChange. Validate and New build their Sources from it alike.
func (c *KubernetesConfig) source(onChange func(discovery.Change), errors *metrics.Counter, log zerolog.Logger) (kube.Config, error) {
	cfg := kube.Config{
		Pods:                    c.Pods,
		Namespace:               c.Namespace,
		Port:                    c.Port,
		BootstrapPortAnnotation: c.BootstrapPortAnnotation,
		OnChange:                onChange,
		Errors:                  errors,
		Log:                     log,
	}
	for _, r := range []struct {
		name  string
		items []string
		sel   *map[string]string
	}{{"prefill", c.Prefill, &cfg.Prefill}, {"decode", c.Decode, &cfg.Decode}, {"fallback", c.Fallback, &cfg.Fallback}} {
		sel, err := kube.ParseSelector(r.items)
		if err != nil {
			return kube.Config{}, fmt.Errorf("%s selector: %w", r.name, err)
		}
		*r.sel = sel
	}
	return cfg, nil
}

// build returns the Source of c. Building one reads nothing from the API.
func (c *KubernetesConfig) build(onChange func(discovery.Change), errors *metrics.Counter, log zerolog.Logger) (*kube.Source, error) {
	cfg, err := c.source(onChange, errors, log)
	if err == nil {
		var src *kube.Source
		if src, err = kube.New(cfg); err == nil {
			return src, nil
		}
	}
	return nil, fmt.Errorf("invalid Kubernetes discovery: %w", err)
}

// check reports the first selector or setting of c that cannot be used.
func (c *KubernetesConfig) check() error {
	if !c.selects() {
		return nil
	}
	_, err := c.build(nil, nil, zerolog.Nop())
	return err
}

// kubeMembers is the Server's part of Kubernetes discovery: the Source,
// and the counts of what it changed.
type kubeMembers struct {
	source *kube.Source
	// errors counts the failed lists and watches of pods, each keeping
	// the workers last seen (kube.Config.Errors).
	errors *metrics.Counter
	// changes count what the Source's changes did.
	changes changeCounts
}

// buildKubernetes sets up the Source of Config.Kubernetes, when it selects
// any pod; nothing is read until startBackground runs it.
func (s *Server) buildKubernetes(log zerolog.Logger) error {
	if !s.cfg.Kubernetes.selects() {
		return nil
	}
	k := &kubeMembers{
		errors:  s.ms.NewCounter(`pdlb_kubernetes_api_errors_total`),
		changes: newChangeCounts(s.ms, `pdlb_kubernetes_workers_changed_total`),
	}
	apply := func(c discovery.Change) { s.applyChange(c, sourceKubernetes, k.changes) }
	var err error
	if k.source, err = s.cfg.Kubernetes.build(apply, k.errors, log); err != nil {
		return err
	}
	// 1 while the last list or watch of pods failed: the pools hold the
	// workers last seen, and no pod change reaches them.
	s.ms.NewGauge(`pdlb_kubernetes_api_failing`, func() float64 {
		if k.source.Failing() {
			return 1
		}
		return 0
	})
	s.kube = k
	return nil
}

// runKubernetes follows Config.Kubernetes's pods until shutdown, which
// stops the informers.
func (s *Server) runKubernetes() {
	if s.kube == nil {
		return
	}
	s.bg.Go(func() {
		s.kube.source.Run(s.ctx)
	})
}
