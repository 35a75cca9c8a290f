package serve

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"pdlb/lb"
	"pdlb/lb/cli"
	"pdlb/lb/policy"
)

// config converts the flags into an lb.Config, with warnings for what pdlb
// accepted but does not do.
func (c *Command) config() (lb.Config, []string) {
	var warnings []string
	implemented := func(flag, p string) string {
		if isRouterOnlyPolicy(p) {
			warnings = append(warnings, fmt.Sprintf("%s %s is not implemented by pdlb; using random", flag, p))
			return lb.PolicyRandom
		}
		return p
	}
	base := implemented("--policy", c.Policy)
	cfg := c.lbConfig()
	cfg.PrefillPolicy, cfg.DecodePolicy, cfg.FallbackPolicy = base, base, base
	if c.PDMinPromptTokens > 0 && len(cfg.Fallback) == 0 {
		which := "prompts"
		if c.DecodeLocalPrefill {
			which = "prompts on the OpenAI routes (which --decode-local-prefill does not cover)"
		}
		warnings = append(warnings, fmt.Sprintf("--pd-min-prompt-tokens %d without --fallback: %s estimated shorter get a 503, having nowhere to go", c.PDMinPromptTokens, which))
	}
	if c.PrefillPolicy != "" {
		cfg.PrefillPolicy = implemented("--prefill-policy", c.PrefillPolicy)
	}
	if c.DecodePolicy != "" {
		cfg.DecodePolicy = implemented("--decode-policy", c.DecodePolicy)
	}
	if c.FallbackPolicy != "" {
		cfg.FallbackPolicy = implemented("--fallback-policy", c.FallbackPolicy)
	}
	cfg.CacheAware = policy.CacheAwareConfig{
		CacheThreshold:      c.CacheThreshold,
		BalanceAbsThreshold: c.BalanceAbsThreshold,
		BalanceRelThreshold: c.BalanceRelThreshold,
		MaxTreeSize:         c.MaxTreeSize,
		EvictionInterval:    time.Duration(c.EvictionIntervalSecs) * time.Second,
	}
	cfg.PrefixHashTokens = c.PrefixTokenCount
	cfg.Manual = policy.ManualConfig{MaxIdle: time.Duration(c.MaxIdleSecs) * time.Second, Assignment: c.AssignmentMode}
	cfg.LoadCheckInterval = time.Duration(c.WorkerLoadCheckInterval) * time.Second
	if w := c.openAdminWarning(); w != "" {
		warnings = append(warnings, w)
	}
	return cfg, warnings
}

// lbConfig is the lb.Config of the flags but the policies, which config
// sets with its warnings.
func (c *Command) lbConfig() lb.Config {
	// sglang_router's retry_max_retries counts every attempt, the first
	// included (retry.rs: max(1), is_last = attempt+1 >= max); lb counts
	// the ones after it.
	attempts := max(c.RetryMaxRetries, 1)
	return lb.Config{
		Prefill:               c.Prefill,
		Decode:                cli.ListItems(c.Decode),
		Fallback:              cli.ListItems(c.Fallback),
		APIKey:                c.APIKey,
		AdminAPIKey:           c.AdminAPIKey,
		OpenOperatorRoutes:    c.MiniLB,
		RequestIDHeaders:      cli.ListItems(c.RequestIDHeaders),
		PDMinPromptTokens:     c.PDMinPromptTokens,
		FirstByteTimeout:      time.Duration(c.FirstByteTimeoutSecs) * time.Second,
		StreamIdleTimeout:     time.Duration(c.StreamIdleTimeoutSecs) * time.Second,
		ClientWriteTimeout:    time.Duration(c.ClientWriteTimeoutSecs) * time.Second,
		ClientStallTimeout:    time.Duration(c.ClientStallTimeoutSecs) * time.Second,
		ClientReadTimeout:     time.Duration(c.ClientReadTimeoutSecs) * time.Second,
		ClientIdleTimeout:     time.Duration(c.ClientIdleTimeoutSecs) * time.Second,
		MaxConnections:        c.MaxConnections,
		MaxHeaderSize:         c.MaxHeaderSize,
		MaxRetries:            attempts - 1,
		DisableRetries:        c.DisableRetries || attempts == 1,
		MaxConcurrentRequests: max(c.MaxConcurrentRequests, 0),
		QueueSize:             cmp.Or(c.QueueSize, -1), // lb's zero is its default
		QueueTimeout:          time.Duration(c.QueueTimeoutSecs) * time.Second,
		HealthCheck:           c.healthCheck(),
		Breaker:               c.breaker(),
		DecodeLocalPrefill:    c.DecodeLocalPrefill,
		RequestTimeout:        time.Duration(c.RequestTimeoutSecs) * time.Second,
		MaxRequestBodySize:    c.MaxPayloadSize,
		MaxBodyMemory:         c.MaxBodyMemory,
		MaxBatchSize:          c.MaxBatchSize,
		IdleConnTimeout:       time.Duration(c.PoolIdleTimeoutSecs * float64(time.Second)),
		ConnectTimeout:        time.Duration(c.ConnectTimeoutSecs * float64(time.Second)),
		MaxConnsPerBackend:    c.MaxConnsPerBackend,
		MaxAbortsPerSecond:    c.MaxAbortsPerSecond,
		AccessLog:             c.AccessLog,
		PrefillDPPolicy:       c.PrefillDPPolicy,
		NoPrewarm:             c.NoPrewarm,
		WarmupTimeout:         time.Duration(c.WarmupTimeoutSecs) * time.Second,
		DNS:                   c.dnsConfig(),
		Kubernetes:            c.kubernetesConfig(),
		// A worker leaving gets what a shutdown gives the whole process,
		// unless told otherwise (issue 23 §1).
		DrainTimeout: time.Duration(cmp.Or(c.DrainTimeoutSecs, c.ShutdownGracePeriodSecs)) * time.Second,
	}
}

// healthCheck is the active health checks' part of lbConfig.
func (c *Command) healthCheck() lb.HealthCheckConfig {
	return lb.HealthCheckConfig{
		Disable:  c.DisableHealthCheck,
		Path:     c.HealthCheckEndpoint,
		Interval: time.Duration(c.HealthCheckIntervalSecs) * time.Second,
		Timeout:  time.Duration(c.HealthCheckTimeoutSecs) * time.Second,
		Rise:     c.HealthSuccessThreshold,
		Fall:     c.HealthFailureThreshold,
	}
}

// breaker is the circuit breaker's part of lbConfig.
func (c *Command) breaker() lb.BreakerConfig {
	return lb.BreakerConfig{
		Disable:    c.DisableCircuitBreaker,
		Threshold:  c.CbFailureThreshold,
		MinBackoff: time.Duration(c.CbTimeoutDurationSecs) * time.Second,
		MaxBackoff: time.Duration(c.CbMaxBackoffSecs) * time.Second,
	}
}

// openAdminWarning is the warning of an admin listener that serves the
// operator routes, with no admin key, on an address other clients may
// reach: --prometheus-host's default is 0.0.0.0, where metrics scrapers
// come from.
func (c *Command) openAdminWarning() string {
	if c.AdminAPIKey != "" || c.MiniLB { // keyed, or open everywhere (openRoutesWarning)
		return ""
	}
	var open []string
	if c.PrometheusPort > 0 && !isLoopbackHost(c.PrometheusHost) {
		open = append(open, "--prometheus-port's on "+c.PrometheusHost)
	}
	if host, _, err := net.SplitHostPort(c.PprofAddr); err == nil && !isLoopbackHost(host) {
		open = append(open, "--pprof-addr's on "+c.PprofAddr)
	}
	if len(open) == 0 {
		return ""
	}
	return "the operator routes (/workers, /flush_cache, /bootstrap, /abort_request with abort_all) answer without a key on the admin listener " +
		strings.Join(open, " and ") + ", to anyone who reaches it: set --admin-api-key, or bind it to 127.0.0.1"
}

// isRouterOnlyPolicy reports whether p is a policy of sglang_router's that
// pdlb does not implement.
func isRouterOnlyPolicy(p string) bool { return slices.Contains(routerOnlyPolicies, p) }

// routerOnlyPolicies are sglang_router policies pdlb does not implement; like
// mini_lb, pdlb uses random instead of failing.
var routerOnlyPolicies = []string{"bucket"}
