package kubetest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// Pods returns a kube.PodsFunc on cs: the pods of a namespace that a
// label selector matches, listed and watched through cs's typed core/v1
// client. Its ListerWatchers tell the informers that they cannot stream a
// watch-list, as cs does (IsWatchListSemanticsUnSupported): client-go asks
// fakes to say so, since they do not send the bookmark that ends one.
func Pods(cs *fake.Clientset) func(namespace, selector string) cache.ListerWatcher {
	return func(namespace, selector string) cache.ListerWatcher {
		pods := cs.CoreV1().Pods(namespace)
		return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.LabelSelector = selector
				return pods.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.LabelSelector = selector
				return pods.Watch(ctx, opts)
			},
		}, cs)
	}
}
