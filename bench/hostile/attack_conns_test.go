package hostile

import (
	"syscall"
	"time"
)

// freshClients is how many new clients idleConnections sends, each on a
// new connection, right after the attacker lets go.
const freshClients = 10

// idleConnections (item 4) opens nofile+form.idleBeyond idle connections,
// up to and beyond pdlb's descriptor limit, holds them form.hold (several
// of pdlb's one-second health probes), then lets go. The well-behaved
// clients, on their kept-alive connections, must be served throughout, no
// worker may be marked down for pdlb's own lack of descriptors (the
// harness checks both), and right after the attacker lets go new clients on
// new connections are served at once: no lingering 503s.
func idleConnections(a *arena) {
	var conns connSet
	defer conns.closeAll()
	n := nofile + a.form.idleBeyond
	var own syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &own); err != nil || own.Cur < uint64(n)+1024 {
		a.Fatalf("the suite's own descriptor limit (%d, %v) is below the %d this attack needs: raise ulimit -n", own.Cur, err, n+1024)
	}
	failed := conns.openMany(a.env.addr, n, "")
	a.Logf("opened %d of %d idle connections (pdlb's limit: %d descriptors); holding them %v", n-failed, n, nofile, a.form.hold)
	<-time.After(a.form.hold)
	conns.closeAll()
	for i := range freshClients {
		c := newClient()
		if err := wellBehaved[i%len(wellBehaved)].do(c, a.env.base); err != nil {
			a.Errorf("a new client right after the attacker let go: %v", err)
		}
		c.CloseIdleConnections()
	}
}
