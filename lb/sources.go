package lb

import "strings"

// A worker's sources: who asks for it to be a member (issue 23 §1).
//
// A worker may be given by several sources at once: the command line, the
// worker API, DNS discovery, Kubernetes discovery. It stays a member while any of them still
// gives it, so that a worker given on the command line is not drained
// because DNS stopped naming it. A removal names the source that no longer
// gives the worker (removeWorker); the worker leaves when none is left.
// The worker API's DELETE is the operator's word and removes every source:
// a worker DNS still names then stays out until DNS stops naming it and
// names it again (discovery reports differences, not its whole set).

// source is a set of the sources that give a worker, one bit each.
type source uint32

const (
	// sourceStart is the command line: Config's Prefill, Decode and
	// Fallback lists.
	sourceStart source = 1 << iota
	// sourceAPI is the worker API's POST /workers.
	sourceAPI
	// sourceDNS is DNS discovery (dnsmembers.go).
	sourceDNS
	// sourceKubernetes is Kubernetes discovery (kubemembers.go).
	sourceKubernetes
	// sourceAll is every source: the worker API's DELETE.
	sourceAll = sourceStart | sourceAPI | sourceDNS | sourceKubernetes
)

// names lists the sources of s, in the order of their bits.
func (s source) names() []string {
	var names []string
	for bit := source(1); bit <= s && bit != 0; bit <<= 1 {
		if s&bit != 0 {
			names = append(names, bit.name())
		}
	}
	return names
}

// name is how GET /workers and the logs name the single source s.
func (s source) name() string {
	switch s {
	case sourceStart:
		return "command_line"
	case sourceAPI:
		return "api"
	case sourceDNS:
		return "dns"
	case sourceKubernetes:
		return "kubernetes"
	}
	return "unknown"
}

// String is s's names, joined, for logs.
func (s source) String() string { return strings.Join(s.names(), ",") }
