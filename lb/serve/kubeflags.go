package serve

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"pdlb/lb"
	"pdlb/lb/discovery/kube"
)

// kubeFlags are sglang_router's flags of Kubernetes service discovery
// (issue 24 §1), honoured: pods whose workers join and leave the pools at
// run time. Their names, defaults and `KEY=VALUE ...` values are
// sglang_router's (router_args.py, SMG's bindings/python/src/smg); the
// deploy/ manifests use them.
type kubeFlags struct {
	ServiceDiscovery          bool     `name:"service-discovery" help:"Follow Kubernetes pods as workers: a pod that --prefill-selector, --decode-selector or --selector matches joins its pool once Running and Ready with a pod IP, as http://PODIP:--service-discovery-port, and is drained when it stops being ready, starts terminating or is deleted. While the API cannot be reached, the workers last seen stay." group:"kubernetes"`
	Selector                  []string `name:"selector" help:"Labels (KEY=VALUE ..., all to match) of the pods that are fallback (aggregated) workers." placeholder:"KEY=VALUE" sep:"none" group:"kubernetes"`
	PrefillSelector           []string `name:"prefill-selector" help:"Labels (KEY=VALUE ..., all to match) of the prefill pods; with it, --prefill may be left out." placeholder:"KEY=VALUE" sep:"none" group:"kubernetes"`
	DecodeSelector            []string `name:"decode-selector" help:"Labels (KEY=VALUE ..., all to match) of the decode pods; with it, --decode may be left out." placeholder:"KEY=VALUE" sep:"none" group:"kubernetes"`
	ServiceDiscoveryNamespace string   `name:"service-discovery-namespace" help:"The namespace whose pods are watched (list and watch of pods there is all pdlb needs). Default: pdlb's own in a pod, else the kubeconfig context's (sglang_router watches every namespace)." placeholder:"NAMESPACE" group:"kubernetes"`
	ServiceDiscoveryPort      int      `name:"service-discovery-port" help:"The workers' port on their pod IP." default:"80" group:"kubernetes"`
	BootstrapPortAnnotation   string   `name:"bootstrap-port-annotation" help:"The pod annotation giving a prefill's bootstrap port; without it pdlb asks the prefill's /server_info." default:"sglang.ai/bootstrap-port" group:"kubernetes"`
	Kubeconfig                string   `name:"kubeconfig" help:"The kubeconfig file to reach the cluster with. Default: the pod's service account in a pod, else $KUBECONFIG, else ~/.kube/config." placeholder:"PATH" type:"path" group:"kubernetes"`
}

// kubernetesConfig is the lb.KubernetesConfig of the flags, but its API
// client and default namespace, which connectKubernetes sets.
func (f *kubeFlags) kubernetesConfig() lb.KubernetesConfig {
	if !f.ServiceDiscovery {
		return lb.KubernetesConfig{}
	}
	return lb.KubernetesConfig{
		Namespace:               f.ServiceDiscoveryNamespace,
		Prefill:                 f.PrefillSelector,
		Decode:                  f.DecodeSelector,
		Fallback:                f.Selector,
		Port:                    f.ServiceDiscoveryPort,
		BootstrapPortAnnotation: f.BootstrapPortAnnotation,
	}
}

// validate refuses selectors without --service-discovery and the
// reverse, a selector that is not one, and a port that is not.
func (f *kubeFlags) validate() error {
	selectors := []struct {
		flag  string
		items []string
	}{{"--prefill-selector", f.PrefillSelector}, {"--decode-selector", f.DecodeSelector}, {"--selector", f.Selector}}
	given := false
	for _, s := range selectors {
		if len(s.items) == 0 {
			continue
		}
		given = true
		if !f.ServiceDiscovery {
			return fmt.Errorf("%s needs --service-discovery", s.flag)
		}
		if _, err := kube.ParseSelector(s.items); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	if f.ServiceDiscovery && !given {
		return errors.New("--service-discovery needs pods to follow: --prefill-selector and --decode-selector, or --selector")
	}
	// Given without it, they would be ignored, as the selectors would.
	if !f.ServiceDiscovery && f.ServiceDiscoveryNamespace != "" {
		return errors.New("--service-discovery-namespace needs --service-discovery")
	}
	if !f.ServiceDiscovery && f.Kubeconfig != "" {
		return errors.New("--kubeconfig needs --service-discovery")
	}
	if errs := validation.IsDNS1123Label(f.ServiceDiscoveryNamespace); f.ServiceDiscoveryNamespace != "" && len(errs) > 0 {
		return fmt.Errorf("--service-discovery-namespace %q is not a namespace: %s", f.ServiceDiscoveryNamespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsQualifiedName(f.BootstrapPortAnnotation); len(errs) > 0 {
		return fmt.Errorf("--bootstrap-port-annotation %q is not an annotation key: %s", f.BootstrapPortAnnotation, strings.Join(errs, "; "))
	}
	if f.ServiceDiscoveryPort < 1 || f.ServiceDiscoveryPort > 65535 {
		return fmt.Errorf("--service-discovery-port must be a port (1 to 65535), got %d", f.ServiceDiscoveryPort)
	}
	return nil
}

// connectKubernetes sets cfg's API client, and its namespace when
// --service-discovery-namespace gave none, with --service-discovery; it
// also sends client-go's log (klog, process-wide) to log.
func (f *kubeFlags) connectKubernetes(cfg *lb.KubernetesConfig, log zerolog.Logger) error {
	if !f.ServiceDiscovery {
		return nil
	}
	klog.SetLogger(kube.Logger(log.With().Str("component", "kubernetes").Logger()))
	pods, namespace, err := kube.Connect(f.Kubeconfig)
	if err != nil {
		return fmt.Errorf("cannot set up Kubernetes service discovery: %w", err)
	}
	cfg.Pods, cfg.Namespace = pods, cmp.Or(cfg.Namespace, namespace)
	return nil
}
