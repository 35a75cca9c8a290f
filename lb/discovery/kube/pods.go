package kube

import (
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"pdlb/lb/discovery"
)

// roleSelector is one role's label selector.
type roleSelector struct {
	role     discovery.Role
	selector map[string]string
}

// roles returns cfg's roles that have a selector, in the order a pod
// matching several is given the first: prefill, decode, fallback.
func roles(cfg Config) []roleSelector {
	var rs []roleSelector
	for _, r := range []roleSelector{{discovery.Prefill, cfg.Prefill}, {discovery.Decode, cfg.Decode}, {discovery.Fallback, cfg.Fallback}} {
		if len(r.selector) > 0 {
			rs = append(rs, r)
		}
	}
	return rs
}

// roleOf returns the role of the first of rs whose selector pod's labels
// match.
func roleOf(rs []roleSelector, pod *corev1.Pod) (discovery.Role, bool) {
	for _, r := range rs {
		if labels.SelectorFromSet(r.selector).Matches(labels.Set(pod.Labels)) {
			return r.role, true
		}
	}
	return 0, false
}

// serving reports whether pod serves, as SMG counts it: not terminating
// (no deletionTimestamp: such pods leave at once, "so their workers drain
// at the start of the grace period, not the end", compute_desired_state),
// with a pod IP, in phase Running, and with its Ready condition True
// (PodInfo::is_healthy). SMG keeps an unready pod's registered workers,
// leaving readiness flaps to its health checker; pdlb removes them, as the
// issue asks: a pod's readiness probe is the operator's word that it
// should get no traffic.
func serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// workerOf returns the worker pod serves as, of role, on port: its URL
// http://PODIP:PORT (SMG's format!("{}:{}", ip, port), the scheme pdlb's
// workers take).
func workerOf(pod *corev1.Pod, role discovery.Role, port int) discovery.Worker {
	return discovery.Worker{Role: role, URL: "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))}
}

// bootstrapPort returns the port of pod's bootstrap-port annotation, 0
// when it has none; ok is false for one that is not a port (1..65535), as
// SMG's parse_port_list refuses junk and 0, and ignores it with a warning
// (resolve_bootstrap_ports). SMG's list of ports, one per worker port of
// its worker-ports annotation, has no sglang_router flag: pdlb takes one
// port.
func bootstrapPort(pod *corev1.Pod, annotation string) (port int, raw string, ok bool) {
	raw, found := pod.Annotations[annotation]
	if !found {
		return 0, "", true
	}
	n, err := strconv.ParseUint(strings.TrimSpace(raw), 10, 16)
	if err != nil || n == 0 {
		return 0, raw, false
	}
	return int(n), raw, true
}
