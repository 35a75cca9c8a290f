package serve

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/lb/cli"
)

// pdlb takes the command line of `python -m sglang_router.launch_router
// --mini-lb`. Scripts pass sglang_router flags that pdlb has no use for; like
// mini_lb, pdlb must not fail on them. Flags pdlb implements are ordinary
// kong flags; the others, listed here by how many values they take (as
// sglang_router's router_args.py declares them), are removed before parsing
// and reported as ignored, except those asking for TLS or authentication
// (securityFlag), which only mini_lb's line may carry.

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

// Parse parses args, a command line of parser, into c, serve's command in
// it. The sglang_router flags serve does not define are removed first and
// returned as ignored; those it must not ignore (checkIgnored), those
// removed from sglang_router (checkRemoved), and worker flags without a URL
// (checkWorkerURLs) are usage errors. The arguments of parser's other
// commands are theirs.
func Parse(parser *kong.Kong, c *Command, args []string) (*kong.Context, IgnoredFlags, error) {
	if err := checkRemoved(parser, args); err != nil {
		return nil, nil, err
	}
	if err := checkWorkerURLs(parser, args); err != nil {
		return nil, nil, err
	}
	kept, ignored := stripRouterFlags(parser, args)
	kctx, err := parser.Parse(kept)
	if err != nil {
		return nil, nil, err
	}
	if err := c.checkIgnored(ignored); err != nil {
		return nil, nil, err
	}
	return kctx, ignored, nil
}

// IgnoredFlags are the sglang_router flags Parse removed, bound into the
// commands' Run so that serve can warn about them.
type IgnoredFlags []string

// removedFlags are the flags of older sglang_router and mini_lb command
// lines that current sglang_router refuses, by name (without "--"), with
// what to write instead. A script written for them fails under either
// router; pdlb says what the line needs, where kong would only call the
// flag unknown (issue 20).
func removedFlags() map[string]string {
	return map[string]string{
		// sglang_router's own, renamed or dropped.
		"pd-disaggregated":  "use --pd-disaggregation",
		"verbose":           "use --log-level debug",
		"eviction-interval": "use --eviction-interval-secs",
		// python -m sglang.srt.disaggregation.mini_lb (and launch_lb),
		// the first mini_lb's launchers.
		"prefill-bootstrap-ports": "give each prefill its bootstrap port after its URL (--prefill URL PORT)",
		"timeout":                 "use --request-timeout-secs",
		"rust-lb":                 "drop it (pdlb is the load balancer)",
		"log-interval":            "drop it (pdlb serves its counters on /metrics, and logs each request with --access-log)",
	}
}

// checkRemoved refuses a serve command line that holds a removed flag
// (removedFlags), naming what to write instead.
func checkRemoved(parser *kong.Kong, args []string) error {
	if len(args) > 0 && isOtherCommand(parser, args[0]) {
		return nil
	}
	removed := removedFlags()
	for _, arg := range args {
		if arg == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if instead, ok := removed[name]; ok && strings.HasPrefix(arg, "--") {
			return cli.UsageError{Err: fmt.Errorf("--%s was removed: %s", name, instead)}
		}
	}
	return nil
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

// securityLoss is what ignoring an sglang_router flag that asks for TLS,
// authentication or auditing costs.
type securityLoss struct {
	refused  string // what pdlb does not do, as a usage error says it
	instead  string // what to do instead
	asMiniLB string // what pdlb does without it, as mini_lb does, for --mini-lb's warning
}

// securityFlag returns the loss of ignoring the sglang_router flag name
// (without "--"); ok is false for a flag whose loss leaves pdlb no less
// secure than its command line asked. (--api-key is pdlb's own flag, and
// --cors-allowed-origins, ignored, only leaves browsers stricter.)
func securityFlag(name string) (loss securityLoss, ok bool) {
	switch name {
	case "tls-cert-path", "tls-key-path":
		return securityLoss{
			refused:  "pdlb does not serve HTTPS",
			instead:  "terminate TLS in front of it (a proxy such as nginx or Envoy, or a service mesh)",
			asMiniLB: "pdlb serves plain HTTP",
		}, true
	case "client-cert-path", "client-key-path":
		return securityLoss{
			refused:  "pdlb presents no client certificate to workers",
			instead:  "originate mTLS to the workers beside it (a sidecar or a service mesh)",
			asMiniLB: "pdlb presents no client certificate to workers",
		}, true
	case "ca-cert-paths":
		return securityLoss{
			refused:  "pdlb takes no CA certificate files",
			instead:  "it verifies https workers against the system's CAs, and the SSL_CERT_FILE (a file) or SSL_CERT_DIR (directories) environment variable names others",
			asMiniLB: "pdlb verifies https workers against the system's CAs (SSL_CERT_FILE, SSL_CERT_DIR)",
		}, true
	case "control-plane-api-keys", "jwt-issuer", "jwt-audience", "jwt-jwks-uri", "jwt-role-claim", "jwt-role-mapping":
		return securityLoss{
			refused: "pdlb checks no control-plane API key or JWT",
			instead: "use --api-key (one key, required of clients on the generate routes, /flush_cache and /abort_request, " +
				"and sent to the workers) and --admin-api-key (one key for the operator routes), or authenticate clients in front of pdlb",
			asMiniLB: "pdlb asks clients for no key or token but --api-key's and --admin-api-key's, if given",
		}, true
	case "control-plane-audit-enabled":
		return securityLoss{
			refused:  "pdlb keeps no audit log",
			instead:  "--access-log logs every request, /flush_cache included",
			asMiniLB: "pdlb keeps no audit log",
		}, true
	}
	return securityLoss{}, false
}

// checkIgnored refuses the ignored sglang_router flags that ask for TLS,
// authentication or auditing, unless the line is mini_lb's (--mini-lb):
// mini_lb ignores them too, but sglang_router's own router does them, and
// its line (`launch_router --pd-disaggregation`) run by pdlb would have
// lost them in silence.
func (c *Command) checkIgnored(ignored IgnoredFlags) error {
	if c.MiniLB {
		return nil
	}
	var losses []securityLoss
	flags := map[securityLoss][]string{}
	for _, f := range ignored {
		loss, ok := securityFlag(strings.TrimPrefix(f, "--"))
		if !ok || slices.Contains(flags[loss], f) {
			continue
		}
		if flags[loss] == nil {
			losses = append(losses, loss)
		}
		flags[loss] = append(flags[loss], f)
	}
	if len(losses) == 0 {
		return nil
	}
	var msg strings.Builder
	for _, loss := range losses {
		msg.WriteString(strings.Join(flags[loss], ", ") + ": " + loss.refused + "; " + loss.instead + "\n")
	}
	msg.WriteString("(mini_lb ignores these flags: with --mini-lb, pdlb ignores them too, with a warning)")
	return cli.UsageError{Err: errors.New(msg.String())}
}

// ignoredWarning is the warning logged for an sglang_router flag that
// serve ignored.
func ignoredWarning(flag string) string {
	if loss, ok := securityFlag(strings.TrimPrefix(flag, "--")); ok {
		return "ignoring an sglang_router flag, as mini_lb does: " + loss.asMiniLB
	}
	return "ignoring an sglang_router flag that pdlb does not implement"
}

// openRoutesWarning is the warning of a --mini-lb line without an admin key:
// it keeps mini_lb's open control routes, which any client can use to act
// on every other's requests.
func (c *Command) openRoutesWarning() string {
	if !c.MiniLB || c.AdminAPIKey != "" {
		return ""
	}
	return "--mini-lb: the operator routes (/flush_cache, /bootstrap, /abort_request with abort_all) are open to every client, " +
		"as in mini_lb; set --admin-api-key to keep them for operators"
}
