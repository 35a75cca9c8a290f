package main

import (
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
)

// pdlb takes the command line of `python -m sglang_router.launch_router
// --mini-lb`. Scripts pass sglang_router flags that pdlb has no use for; like
// mini_lb, pdlb must not fail on them. Flags pdlb implements are ordinary
// kong flags; the others, listed here by how many values they take
// (PROTOCOL.md §2), are removed before parsing and reported as ignored.

// arity is how many values an sglang_router flag takes.
type arity int

const (
	noValue arity = iota
	oneValue
	oneOrMore
	zeroOrMore
)

// routerFlags returns every sglang_router flag name (without "--") with its
// arity.
func routerFlags() map[string]arity {
	flags := map[string]arity{}
	add := func(a arity, names string) {
		for _, n := range strings.Fields(names) {
			flags[n] = a
		}
	}
	add(noValue, `dp-aware enable-igw mini-lb test-external-dp-routing pd-disaggregation
		json-log service-discovery disable-retries disable-circuit-breaker disable-health-check
		tokenizer-cache-enable-l0 tokenizer-cache-enable-l1 enable-wasm enable-trace
		control-plane-audit-enabled`)
	add(oneValue, `host port policy prefill-policy decode-policy cache-threshold
		balance-abs-threshold balance-rel-threshold bucket-adjust-interval-secs
		eviction-interval-secs max-tree-size max-idle-secs assignment-mode max-payload-size
		decode worker-startup-timeout-secs worker-startup-check-interval log-dir log-level
		service-discovery-port service-discovery-namespace bootstrap-port-annotation
		prometheus-port prometheus-host request-timeout-secs shutdown-grace-period-secs
		pool-idle-timeout-secs connect-timeout-secs pool-max-idle-per-host tcp-keepalive-secs
		max-concurrent-requests queue-size queue-timeout-secs rate-limit-tokens-per-second
		retry-max-retries retry-initial-backoff-ms retry-max-backoff-ms retry-backoff-multiplier
		retry-jitter-factor cb-failure-threshold cb-success-threshold cb-timeout-duration-secs
		cb-window-duration-secs health-failure-threshold health-success-threshold
		health-check-timeout-secs health-check-interval-secs health-check-endpoint model-path
		tokenizer-path chat-template tokenizer-cache-l0-max-entries tokenizer-cache-l1-max-memory
		reasoning-parser tool-call-parser mcp-config-path backend history-backend
		oracle-wallet-path oracle-tns-alias oracle-connect-descriptor oracle-username
		oracle-password oracle-pool-min oracle-pool-max oracle-pool-timeout-secs
		postgres-db-url postgres-pool-max redis-url redis-pool-max redis-retention-days
		client-cert-path client-key-path tls-cert-path tls-key-path otlp-traces-endpoint
		api-key jwt-issuer jwt-audience jwt-jwks-uri jwt-role-claim`)
	add(oneOrMore, `prefill selector prefill-selector decode-selector prometheus-duration-buckets`)
	add(zeroOrMore, `worker-urls request-id-headers cors-allowed-origins ca-cert-paths
		control-plane-api-keys jwt-role-mapping`)
	return flags
}

// stripRouterFlags returns args without the sglang_router flags (and their
// values) that the serve command does not define, and the flags it removed.
// A negative number after a serve flag that takes a value is joined to it
// ("--max-concurrent-requests=-1"), as argparse reads it as the value where
// kong would take it for a short flag; the values of a serve flag that
// argparse reads as a list ("--request-id-headers a b") become one flag
// each. Arguments of the other commands are
// returned untouched.
func stripRouterFlags(parser *kong.Kong, args []string) (kept, ignored []string) {
	if len(args) > 0 && isOtherCommand(parser, args[0]) {
		return args, nil
	}
	known, router := serveFlagNames(parser), routerFlags()
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return append(kept, args[i:]...), ignored
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		a, isRouter := router[name]
		if f := known[name]; f != nil && strings.HasPrefix(arg, "--") && !hasValue {
			switch {
			case f.IsSlice() && (a == oneOrMore || a == zeroOrMore):
				// argparse's nargs: the values follow the flag, where kong
				// takes one a flag.
				for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
					kept = append(kept, arg+"="+args[i+1])
					i++
				}
				continue
			case !f.IsBool() && i+1 < len(args) && isNegativeNumber(args[i+1]):
				kept = append(kept, arg+"="+args[i+1])
				i++
				continue
			}
		}
		if !strings.HasPrefix(arg, "--") || !isRouter || known[name] != nil {
			kept = append(kept, arg)
			continue
		}
		ignored = append(ignored, "--"+name)
		switch {
		case hasValue || a == noValue:
			// argparse takes a single value from --flag=value, whatever nargs.
		case a == oneValue:
			i++
		default:
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
		}
	}
	return kept, ignored
}

// isOtherCommand reports whether name is a command of the parser other than
// serve, whose arguments are its own.
func isOtherCommand(parser *kong.Kong, name string) bool {
	for _, child := range parser.Model.Children {
		if child.Name == name {
			return name != "serve"
		}
	}
	return false
}

// isNegativeNumber reports whether arg is a number below zero, such as "-1"
// or "-0.5".
func isNegativeNumber(arg string) bool {
	_, err := strconv.ParseFloat(arg, 64)
	return err == nil && strings.HasPrefix(arg, "-")
}

// serveFlagNames returns the flags the serve command accepts, its parents'
// included, by long name.
func serveFlagNames(parser *kong.Kong) map[string]*kong.Flag {
	names := map[string]*kong.Flag{}
	for _, child := range parser.Model.Children {
		if child.Name != "serve" {
			continue
		}
		for _, group := range child.AllFlags(false) {
			for _, f := range group {
				names[f.Name] = f
			}
		}
	}
	return names
}
