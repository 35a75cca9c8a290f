package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// PodsFunc returns the ListerWatcher of the pods in namespace that
// selector, a label selector in Kubernetes' syntax, matches. A Source
// calls it once per role, in New. Connect builds the one pdlb runs with;
// tests adapt client-go's fake clientset (package kubetest).
type PodsFunc func(namespace, selector string) cache.ListerWatcher

// namespaceFile is where Kubernetes mounts the namespace of a pod's
// service account: the pod's own.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Connect returns the pods of the API server and the namespace to watch
// when none is given. kubeconfig, when set, names the kubeconfig file
// used; else, in a pod, its service account's in-cluster configuration
// (rest.InClusterConfig), and the pod's own namespace; else $KUBECONFIG,
// else ~/.kube/config, with its current context's namespace ("default"
// when it names none). Nothing is sent to the API server: a cluster that
// cannot be reached shows when the pods are listed.
//
// The default namespace is pdlb's own, where SMG watches every namespace
// when given none (Api::all in start_service_discovery): pdlb's RBAC is a
// Role, in one namespace, which cannot list pods cluster-wide.
func Connect(kubeconfig string) (PodsFunc, string, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			ns, err := os.ReadFile(namespaceFile)
			if err != nil {
				return nil, "", fmt.Errorf("cannot read the pod's namespace: %w", err)
			}
			return connect(cfg, strings.TrimSpace(string(ns)))
		}
		if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", fmt.Errorf("cannot read the in-cluster configuration: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // $KUBECONFIG, else ~/.kube/config
	rules.ExplicitPath = kubeconfig
	loaded := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loaded.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("cannot load a kubeconfig: %w", err)
	}
	ns, _, err := loaded.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("cannot read the kubeconfig's namespace: %w", err)
	}
	return connect(cfg, ns)
}

// connect returns the pods of cfg's API server, read with pdlb's user
// agent, and namespace.
//
// The client is a bare core/v1 REST client with a scheme of its own that
// knows core/v1 and meta/v1 alone, not client-go's typed clientset: the
// typed core/v1 client imports kubernetes/scheme, which registers every
// API group, and the apply configurations, and would triple pdlb's binary
// for the one resource it reads (issue 24: the binary grows by no more
// than it must).
func connect(cfg *rest.Config, namespace string) (PodsFunc, string, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil { // with meta/v1's list and watch types
		return nil, "", fmt.Errorf("cannot build the core/v1 scheme: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "pdlb"
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("cannot build a Kubernetes client: %w", err)
	}
	pods := func(namespace, selector string) cache.ListerWatcher {
		return cache.NewFilteredListWatchFromClient(c, "pods", namespace, func(o *metav1.ListOptions) {
			o.LabelSelector = selector
		})
	}
	return pods, namespace, nil
}
