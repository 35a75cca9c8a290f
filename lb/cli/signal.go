package cli

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"
	"time"
)

// SameSignalWindow is how soon after a stop signal another one is the same
// signal again, not a second: GNU timeout, and anything else that signals
// its child and then the child's whole process group, delivers one stop
// twice, microseconds apart. A person's second Ctrl-C comes later.
const SameSignalWindow = 250 * time.Millisecond

// RunUntilSignal runs serve on a listener on addr, with a context that is
// done on SIGINT or SIGTERM: the baselines' way of running.
func RunUntilSignal(addr string, serve func(context.Context, net.Listener) error) error {
	ln, err := Listen(addr)
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, ln)
}
