package kube

import (
	"errors"
	"fmt"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/util/validation"

	"pdlb/lb/discovery"
)

// Defaults for the zero fields of Config: sglang_router's
// --service-discovery-port and --bootstrap-port-annotation (RouterArgs in
// bindings/python/src/smg/router_args.py, SMG; ServiceDiscoveryConfig in
// model_gateway/src/service_discovery.rs).
const (
	defaultPort                    = 80
	defaultBootstrapPortAnnotation = "sglang.ai/bootstrap-port"
)

// Config says which pods a Source watches, and whom it tells. A role with
// no selector has no workers found.
type Config struct {
	// Pods gives each role's informer its pods to list and watch: Connect
	// builds it on the API server; tests adapt the fake clientset
	// (kubetest.Pods). Required. A ListerWatcher it returns that has
	// IsWatchListSemanticsUnSupported (one on the fake clientset) tells
	// the informers whether they may ask for a watch-list stream
	// (watchlist.DoesClientNotSupportWatchListSemantics).
	Pods PodsFunc
	// Namespace is the namespace watched. Required: pdlb watches one
	// namespace, which a Role's RBAC grants (Connect says the default).
	Namespace string
	// Prefill, Decode and Fallback are the label selectors of each role,
	// label → value, every label to match (sglang_router's
	// --prefill-selector, --decode-selector, --selector). A pod matching
	// several is taken by the first of prefill, decode, fallback, as SMG
	// gives prefill precedence over decode and both over regular
	// (PodInfo::from_pod). nil or empty: no workers of that role.
	Prefill, Decode, Fallback map[string]string
	// Port is the workers' port on their pod IP; 0 means 80
	// (--service-discovery-port).
	Port int
	// BootstrapPortAnnotation is the pod annotation giving a prefill's
	// bootstrap port; "" means sglang.ai/bootstrap-port.
	BootstrapPortAnnotation string
	// OnChange receives each change of the set of workers, one call at a
	// time, in order, from Run's goroutine; the caller applies it
	// (removals first). nil drops the changes: Workers still tells the set.
	OnChange func(discovery.Change)
	// Errors, when set, counts the lists and watches of pods that failed;
	// each leaves the last pods seen in place.
	Errors *metrics.Counter
	// Log receives a line when the API stops and starts answering, one
	// per bad bootstrap-port annotation, and at debug level one per worker
	// added or removed. New adds the field component=kubernetes.
	Log zerolog.Logger
}

func (cfg Config) withDefaults() Config {
	if cfg.Port == 0 {
		cfg.Port = defaultPort
	}
	if cfg.BootstrapPortAnnotation == "" {
		cfg.BootstrapPortAnnotation = defaultBootstrapPortAnnotation
	}
	return cfg
}

// validate checks what withDefaults left.
func (cfg Config) validate() error {
	if cfg.Pods == nil {
		return errors.New("no Kubernetes API client")
	}
	if cfg.Namespace == "" {
		return errors.New("no namespace to watch")
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", cfg.Namespace, strings.Join(errs, "; "))
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("worker port %d is outside 1..65535", cfg.Port)
	}
	if errs := validation.IsQualifiedName(cfg.BootstrapPortAnnotation); len(errs) > 0 {
		return fmt.Errorf("bootstrap-port annotation %q: %s", cfg.BootstrapPortAnnotation, strings.Join(errs, "; "))
	}
	for _, r := range roles(cfg) {
		if err := checkSelector(r.selector); err != nil {
			return fmt.Errorf("%s selector: %w", r.role, err)
		}
	}
	return nil
}

// ParseSelector returns the label selector of items, each one or more
// KEY=VALUE pairs separated by spaces or commas (sglang_router takes
// `--selector app=a tier=b`, and one argument "app=a tier=b" as OME passes
// it: RouterArgs._parse_selector). Every pair must be a valid label
// (Kubernetes' syntax); set-based selectors (!=, in) are not
// sglang_router's and are refused, as is a key given two values (argparse
// keeps the last: a typo would select pods the user did not mean), and
// items with no pair at all. No items is the empty selector.
func ParseSelector(items []string) (map[string]string, error) {
	sel := map[string]string{}
	for _, item := range items {
		for _, pair := range strings.FieldsFunc(item, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
			k, v, ok := strings.Cut(pair, "=")
			if !ok {
				return nil, fmt.Errorf("%q is not KEY=VALUE", pair)
			}
			if old, dup := sel[k]; dup && old != v {
				return nil, fmt.Errorf("label %q given twice, as %q and %q", k, old, v)
			}
			sel[k] = v
		}
	}
	if len(items) > 0 && len(sel) == 0 {
		// A selector given blank (an unset variable in a manifest) would
		// watch nothing, without a word.
		return nil, fmt.Errorf("%q has no KEY=VALUE pair", strings.Join(items, " "))
	}
	if err := checkSelector(sel); err != nil {
		return nil, err
	}
	return sel, nil
}

// checkSelector refuses a label key or value Kubernetes would.
func checkSelector(sel map[string]string) error {
	for k, v := range sel {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label value %q of %s: %s", v, k, strings.Join(errs, "; "))
		}
	}
	return nil
}
