package lb

import (
	"time"

	"pdlb/lb/policy"
)

// The defaults of Config's optional fields, concern by concern.

// Defaults of MaxRequestBodySize and MaxBatchSize.
const (
	defaultMaxRequestBodySize = 64 << 20
	defaultMaxBatchSize       = 4096
)

// setDefaults gives each optional field left zero its documented default,
// concern by concern.
func (c *Config) setDefaults() {
	if len(c.RequestIDHeaders) == 0 {
		c.RequestIDHeaders = []string{string(headerRequestID)}
	}
	c.setRoutingDefaults()
	c.setTimeoutDefaults()
	c.setLimitDefaults()
	c.setDPDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
}

// setRoutingDefaults defaults the pools' policies and the retries.
func (c *Config) setRoutingDefaults() {
	if c.PrefillPolicy == "" {
		c.PrefillPolicy = PolicyRandom
	}
	if c.DecodePolicy == "" {
		c.DecodePolicy = PolicyRandom
	}
	if c.FallbackPolicy == "" {
		c.FallbackPolicy = PolicyRandom
	}
	c.setPolicyDefaults()
	switch {
	case c.DisableRetries:
		c.MaxRetries = 0
	case c.MaxRetries <= 0:
		c.MaxRetries = 2
	}
}

// setTimeoutDefaults defaults the timeouts of generations, clients, the
// queue and worker connections.
func (c *Config) setTimeoutDefaults() {
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 180 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 1800 * time.Second
	}
	if c.FirstByteTimeout <= 0 {
		c.FirstByteTimeout = 300 * time.Second
	}
	if c.StreamIdleTimeout <= 0 {
		c.StreamIdleTimeout = 300 * time.Second
	}
	if c.ClientWriteTimeout <= 0 {
		c.ClientWriteTimeout = 60 * time.Second
	}
	if c.ClientStallTimeout <= 0 {
		c.ClientStallTimeout = 10 * time.Second
	}
	c.ClientStallTimeout = min(c.ClientStallTimeout, c.ClientWriteTimeout)
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 60 * time.Second
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.IdleConnTimeout <= 0 {
		c.IdleConnTimeout = 4 * time.Second
	}
	if c.ClientIdleTimeout <= 0 {
		c.ClientIdleTimeout = 90 * time.Second
	}
	if c.ClientReadTimeout <= 0 {
		c.ClientReadTimeout = 60 * time.Second
	}
}

// setLimitDefaults defaults the bounds on requests, connections and memory.
func (c *Config) setLimitDefaults() {
	if c.QueueSize == 0 {
		c.QueueSize = 256
	}
	if c.MaxConnsPerBackend <= 0 {
		c.MaxConnsPerBackend = 4096
	}
	if c.MaxAbortsPerSecond <= 0 {
		c.MaxAbortsPerSecond = 100
	}
	if c.MaxRequestBodySize <= 0 {
		c.MaxRequestBodySize = defaultMaxRequestBodySize
	}
	if c.MaxBatchSize <= 0 {
		c.MaxBatchSize = defaultMaxBatchSize
	}
	if c.MaxBodyMemory <= 0 {
		c.MaxBodyMemory = max(1<<30, c.minBodyMemory())
	}
	if c.MaxResponseBodySize <= 0 {
		c.MaxResponseBodySize = 256 << 20
	}
	if c.MaxHeaderSize <= 0 {
		c.MaxHeaderSize = 4 << 10
	}
}

// setDPDefaults defaults the DP-rank policy, the pairs' warm-up and the
// refresh of the prefills' bootstrap info.
func (c *Config) setDPDefaults() {
	if c.WarmupTimeout <= 0 {
		c.WarmupTimeout = 30 * time.Second
	}
	if c.PrefillDPPolicy == "" {
		c.PrefillDPPolicy = DPPolicyOff
	}
	if c.BootstrapRefresh <= 0 {
		c.BootstrapRefresh = 5 * time.Second
	}
}

// setPolicyDefaults defaults the routing policies' parameters. cache_aware's
// come whole: a threshold of 0 is one a launch line may mean.
func (c *Config) setPolicyDefaults() {
	if c.CacheAware == (policy.CacheAwareConfig{}) {
		c.CacheAware = policy.DefaultCacheAware()
	}
	if c.Manual.MaxIdle == 0 {
		c.Manual.MaxIdle = policy.DefaultManual().MaxIdle
	}
	if c.Manual.Assignment == "" {
		c.Manual.Assignment = policy.DefaultManual().Assignment
	}
	if c.PrefixHashTokens == 0 {
		c.PrefixHashTokens = policy.DefaultPrefixHash().Tokens
	}
	if c.LoadCheckInterval == 0 {
		c.LoadCheckInterval = time.Second
	}
}
