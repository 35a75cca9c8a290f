package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// namespaceFile is where Kubernetes mounts the namespace of a pod's
// service account: the pod's own.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Connect returns a client of the pods API and the namespace to watch
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
func Connect(kubeconfig string) (corev1client.PodsGetter, string, error) {
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

// connect returns the core/v1 client of cfg, with pdlb's user agent.
func connect(cfg *rest.Config, namespace string) (corev1client.PodsGetter, string, error) {
	cfg.UserAgent = "pdlb"
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("cannot build a Kubernetes client: %w", err)
	}
	return c, namespace, nil
}
