// Package kube finds workers in Kubernetes: it watches, through client-go
// informers (tools/cache), the pods of one namespace that
// each role's label selector matches (sglang_router's --prefill-selector,
// --decode-selector, and --selector for the fallback pool), and tells its
// owner how the set of workers they serve as changes, as the discovery.Change
// values of package discovery's DNS Source. It only keeps the desired
// set: the owner (package lb) applies each Change through its one
// membership path, where a worker added is health-checked and warmed and
// one removed is drained (issue 24 §1). It is a package of its own so that
// package discovery, and its tests, do not link client-go.
//
// Which pods count, as SMG's service discovery counts them
// (model_gateway/src/service_discovery.rs: PodInfo::is_healthy,
// compute_desired_state): a pod serves when it is not terminating (no
// deletionTimestamp), has a pod IP, is in phase Running and has its Ready
// condition True. Its worker is http://PODIP:PORT, PORT being Config.Port
// (--service-discovery-port, 80 by default); a prefill's bootstrap port is
// its pod's Config.BootstrapPortAnnotation (sglang.ai/bootstrap-port), a
// port number, or 0 (learned from the prefill's /server_info) without one;
// a value that is not a port is logged and ignored, as SMG does. A pod
// that stops being ready, starts terminating, leaves phase Running or is
// deleted leaves at once; a new pod IP or bootstrap port is a worker
// removed and another added. Unlike SMG, which keeps an unready pod's
// workers for its health checker to judge, pdlb removes them: the issue
// asks that a pod not ready leave. A pod two roles' selectors match is the
// first's of prefill, decode, fallback, as SMG orders them.
//
// What is kept: when a list or watch of pods fails (the API server cannot
// be reached, or refuses pdlb), the informer's reflector retries with a
// backoff and its store keeps the pods it had, so the workers last seen
// stay; the failure is logged when it starts and stops and counted in
// Config.Errors, and Source.Failing tells it. When the API answers again
// the pods are listed anew and whatever changed meanwhile is delivered.
// Until the first list succeeds, no worker is delivered.
//
// The client: Connect reads pods through a bare core/v1 REST client with a
// scheme of its own (core/v1 and meta/v1), not the typed clientset, whose
// core/v1 client links every API group's scheme and the apply
// configurations (it nearly doubled pdlb's binary, client-go v0.37). It only
// lists and watches: the RBAC's get is not used. client-go's
// WatchListClient feature is on by default (features/known_features.go,
// v1.35), and a ListerWatcher on a REST client does not opt out
// (util/watchlist.DoesClientNotSupportWatchListSemantics), so each
// informer first asks for a watch-list: one watch, sendInitialEvents=true,
// that streams the pods as ADDED events up to a bookmark marked
// k8s.io/initial-events-end, then goes on as the watch; the transform and
// the label selector apply to it alike, and it needs the watch verb only.
// A server that does not serve watch-lists refuses the request as invalid
// (apimachinery's ValidateListOptions), and the reflector lists, then
// watches, as before (Reflector.ListAndWatchWithContext); that refusal is
// no failure of the API (watchListRefused). Both ways are tested on a
// fake API server (apiserver_test.go). The fake clientset says it cannot
// stream (kubetest.Pods keeps what it says), so tests on it list.
//
// Workers are named by address, sorted by role then URL, so that replicas
// watching the same pods hold the same set.
package kube
