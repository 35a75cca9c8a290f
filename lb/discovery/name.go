package discovery

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// name is one name a Source resolves, parsed from Config.
type name struct {
	role Role
	// host is the DNS name, as given (a trailing dot makes it absolute,
	// skipping the resolver's search list).
	host string
	// port is the port given with the name, or Config.Port.
	port int
}

// String returns the name as given, for logs: role and NAME[:PORT].
func (n name) String() string {
	return n.role.String() + " " + net.JoinHostPort(n.host, strconv.Itoa(n.port))
}

// parseNames parses every name of cfg, which has its defaults.
func parseNames(cfg Config) ([]name, error) {
	var names []name
	for _, group := range []struct {
		role  Role
		specs []string
	}{{Prefill, cfg.Prefill}, {Decode, cfg.Decode}, {Fallback, cfg.Fallback}} {
		for _, spec := range group.specs {
			n, err := parseName(group.role, spec, cfg.Port)
			if err != nil {
				return nil, err
			}
			names = append(names, n)
		}
	}
	return names, nil
}

// parseName parses "NAME" or "NAME:PORT". A bare IPv6 literal is a NAME;
// with a port it is bracketed, as in a URL.
func parseName(role Role, spec string, defaultPort int) (name, error) {
	n := name{role: role, host: spec, port: defaultPort}
	if strings.Contains(spec, ":") && !isBareIPv6(spec) {
		host, port, err := net.SplitHostPort(spec)
		if err != nil {
			return name{}, fmt.Errorf("cannot parse %s name %q as NAME or NAME:PORT: %w", role, spec, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return name{}, fmt.Errorf("port %q of %s name %q is not a number in 1..65535", port, role, spec)
		}
		n.host, n.port = host, p
	}
	if n.host == "" {
		return name{}, fmt.Errorf("%s name %q has no host", role, spec)
	}
	return n, nil
}

func isBareIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}
