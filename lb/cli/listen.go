package cli

import (
	"net"
	"net/netip"
	"strings"
)

// Listen listens on addr, HOST:PORT. Go listens on IPv6 as well for an
// unspecified IPv4 host (0.0.0.0), where uvicorn, and so mini_lb, listen on
// IPv4 only: an IPv4 host means IPv4 here too.
func Listen(addr string) (net.Listener, error) {
	network := "tcp"
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
			network = "tcp4"
		}
	}
	return net.Listen(network, addr)
}

// ListItems trims each of a list flag's values and drops the empty ones:
// "a, b" is a natural way to write a comma-separated list, "a,,b" a slip,
// and --prefill's lists are read the same way.
func ListItems(vs []string) []string {
	out := vs[:0]
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
