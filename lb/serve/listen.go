package serve

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"pdlb/lb/cli"
)

// checkListenAddrs refuses the listen addresses that cannot be listened
// on whatever the machine: found when pdlb starts, they were failures at
// run time (status 1) rather than usage errors.
func (c *Command) checkListenAddrs() error {
	if err := checkHost("--host", c.Host, "--port"); err != nil {
		return err
	}
	if err := checkHost("--prometheus-host", c.PrometheusHost, "--prometheus-port"); err != nil {
		return err
	}
	if c.PprofAddr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.PprofAddr)
	if err != nil {
		return fmt.Errorf("--pprof-addr %q is not HOST:PORT, such as 127.0.0.1:6060: %w", c.PprofAddr, err)
	}
	if _, ok := cli.ParsePort(port); !ok {
		return fmt.Errorf("--pprof-addr %q: %q is not a port from 1 to 65535", c.PprofAddr, port)
	}
	if strings.ContainsAny(host, "[]") {
		return fmt.Errorf("--pprof-addr %q is not HOST:PORT, such as 127.0.0.1:6060 or [::1]:6060", c.PprofAddr)
	}
	return nil
}

// checkHost refuses a host flag's value that holds a port, or brackets, as
// "0.0.0.0:9000" or "[::]" do: pdlb joins it to portFlag's port, and could
// listen on neither. A colon belongs to an IPv6 address only.
func checkHost(flag, host, portFlag string) error {
	if strings.ContainsAny(host, "[]") {
		return fmt.Errorf("%s %q is not a host: write an IPv6 address without brackets", flag, host)
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%s %q is not a host: give the port with %s", flag, host, portFlag)
		}
	}
	return nil
}

// isLoopbackHost reports whether host, a listen address's host, takes
// connections from this machine only.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
