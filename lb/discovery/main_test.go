package discovery

import (
	"context"
	"errors"
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	initResolverConfig()
	goleak.VerifyTestMain(m)
}

// initResolverConfig makes Go's resolver read /etc/resolv.conf and
// /etc/nsswitch.conf once, outside any bubble. Each process-wide
// configuration it builds holds a channel that every later lookup uses;
// made inside a testing/synctest bubble, it would belong to that bubble,
// and the next bubble's lookup would be a fatal error. Nothing is sent:
// the dial fails at once.
func initResolverConfig() {
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no dns in TestMain")
	}}
	r.LookupSRV(context.Background(), "http", "tcp", "pdlb.invalid.")
	r.LookupNetIP(context.Background(), "ip", "pdlb.invalid.")
}
