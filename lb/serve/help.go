package serve

import (
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/lb"
)

// Options are the options serve needs of the parser it is a command of:
// its flags' groups, help texts without the environment variables that
// serve's help names by a rule, and the variables its tags name, so that
// lists such as --prefill-dp-policy's enum come from package lb's one list
// rather than a copy in a tag.
func Options() []kong.Option {
	return []kong.Option{
		kong.ExplicitGroups(serveGroups()),
		kong.ValueFormatter(helpValue),
		kong.Vars{"dp_policies": strings.Join(lb.DPPolicies(), ",")},
	}
}

// serveGroups are the headings of `pdlb serve --help`, in the order the
// flags of Command come in: one heading a concern, as the README lists
// them, so that seventy flags read as ten short lists (issue 20). Every
// serve flag names one in its group tag; TestEveryServeFlagHasAGroup holds
// a new flag to it.
func serveGroups() []kong.Group {
	return []kong.Group{
		{Key: "workers", Title: "Workers:",
			Description: "The SGLang servers pdlb sends requests to."},
		{Key: "discovery", Title: "Workers from DNS:",
			Description: "Names resolved again and again for workers that join and leave at run time: a worker found joins and is health-checked, one gone is drained before it is removed."},
		{Key: "kubernetes", Title: "Workers from Kubernetes (sglang_router's service discovery):",
			Description: "Pods watched through the Kubernetes API, by label, for workers that join and leave at run time: a pod Running and Ready joins, health-checked and warmed; one that stops being ready, terminates or is deleted is drained before it is removed."},
		{Key: "listen", Title: "Listening and keys:",
			Description: "Where pdlb listens, and the keys its clients and operators must send."},
		{Key: "routing", Title: "Routing, policies and retries:",
			Description: "How a request's prefill and decode are picked, when it goes decode-only, and how often it is tried."},
		{Key: "dp", Title: "DP ranks and warm-up:",
			Description: "Prefill data-parallel ranks, and warming each decode × prefill pair before hinted requests reach it."},
		{Key: "timeouts", Title: "Timeouts:",
			Description: "How long each step may take, in seconds: generations, clients, workers, shutdown."},
		{Key: "health", Title: "Health checks and circuit breaker:",
			Description: "How workers are found down (probes), ejected (failed requests), and brought back."},
		{Key: "limits", Title: "Limits:",
			Description: "Bounds on requests, connections and memory; beyond them pdlb queues, or answers 4xx or 503."},
		{Key: "observability", Title: "Logging and metrics:",
			Description: "Logs, request IDs, and the listeners for /metrics, the operator routes and profiles."},
		{Key: "compat", Title: "mini_lb and sglang_router compatibility:",
			Description: "Flags accepted so that their command lines run unchanged. sglang_router's other flags are " +
				"ignored with a warning; its TLS and authentication flags only with --mini-lb; its removed ones are usage errors naming their replacement."},
	}
}

// Help is serve's help under its usage line: what every flag shares, said
// once rather than beside each of them.
func (c *Command) Help() string {
	return "The flags follow sglang_router's, so a mini_lb command line runs unchanged. Each can also be set by an " +
		"environment variable, PDLB_ and its name in capitals (--request-timeout-secs: PDLB_REQUEST_TIMEOUT_SECS); " +
		"a list flag's variable takes its items separated by commas."
}

// helpValue is a flag's help text. The environment variable of a serve flag
// is left out: its name follows the rule serve's help states, and sixty of
// them made the help a fifth longer. The tools' (PDLB_BENCH_...) are shown.
func helpValue(v *kong.Value) string {
	if v.Flag != nil && len(v.Tag.Envs) == 1 && v.Tag.Envs[0] == serveEnv(v.Name) {
		return v.Help
	}
	return kong.DefaultHelpValueFormatter(v)
}

// serveEnv is the environment variable of the serve flag name, as
// cli.Envars names it.
func serveEnv(name string) string {
	return "PDLB_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
