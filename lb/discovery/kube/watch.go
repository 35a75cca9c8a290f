package kube

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// roleWatch is the informer of one role's pods: a list, then a watch, of
// the pods its selector matches, the API server filtering them. When a
// list or watch fails, the informer's reflector retries with a backoff
// and its store keeps the pods it had: the last good set stays.
type roleWatch struct {
	roleSelector
	informer cache.SharedIndexInformer
	// failing tells whether the last list or watch failed, so that the log
	// says when the API stops and starts answering rather than at every
	// retry.
	failing atomic.Bool
}

// newRoleWatch returns the informer of r's pods for s, every event poking
// s's loop.
func (s *Source) newRoleWatch(r roleSelector) (*roleWatch, error) {
	rw := &roleWatch{roleSelector: r}
	pods := s.cfg.Pods(s.cfg.Namespace, labels.SelectorFromSet(r.selector).String())
	lw := cache.ToListerWatcherWithContext(pods)
	noted := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := lw.ListWithContext(ctx, opts)
			s.noteCall(ctx, rw, err, false)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, opts)
			if !watchListRefused(opts, err) { // else the reflector lists instead: no failure (doc.go)
				s.noteCall(ctx, rw, err, true)
			}
			return w, err
		},
	}
	// noted keeps what pods says of watch-lists (doc.go).
	rw.informer = cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(noted, pods),
		&corev1.Pod{}, cache.SharedIndexInformerOptions{})
	if err := rw.informer.SetTransform(trimPod); err != nil {
		return nil, err
	}
	poke := func() {
		select {
		case s.poke <- struct{}{}:
		default: // one pending is enough: the loop reads every store
		}
	}
	_, err := rw.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	return rw, err
}

// watchListRefused reports whether err is an API server's refusal of the
// watch-list that opts asks for (sendInitialEvents): a server whose
// WatchList feature is off, or older than it, answers 422 Invalid
// (ValidateListOptions in apimachinery's meta/internalversion/validation),
// and the reflector then lists and watches as before.
func watchListRefused(opts metav1.ListOptions, err error) bool {
	return opts.SendInitialEvents != nil && *opts.SendInitialEvents && apierrors.IsInvalid(err)
}

// noteCall counts a failed list or watch of rw, and logs when rw's calls
// start and stop failing. A call cut short by shutdown is not a failure.
// Only a watch that starts ends a failure: a list alone brings no change
// after it, and with watches refused (a Role without "watch") every list
// would end the failure, and the next watch start it again.
func (s *Source) noteCall(ctx context.Context, rw *roleWatch, err error, isWatch bool) {
	if err != nil && ctx.Err() != nil {
		return
	}
	if err == nil && !isWatch {
		return
	}
	if err == nil {
		if rw.failing.Swap(false) {
			s.cfg.Log.Info().Stringer("role", rw.role).Msg("kubernetes API answers again; following its pods")
		}
		return
	}
	if s.cfg.Errors != nil {
		s.cfg.Errors.Inc()
	}
	e := s.cfg.Log.Debug()
	if !rw.failing.Swap(true) {
		e = s.cfg.Log.Warn()
	}
	e.Err(err).Stringer("role", rw.role).Msg("cannot list or watch pods; keeping the workers last seen")
}

// trimPod keeps of a pod what serving, workerOf and bootstrapPort read,
// and its identity, so that the stores hold small objects: a pod's spec
// and managed fields are most of it.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone (cache.DeletedFinalStateUnknown)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			Annotations:       pod.Annotations,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, Conditions: pod.Status.Conditions},
	}, nil
}
