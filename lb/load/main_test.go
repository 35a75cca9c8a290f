package load

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if err := startServerDate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// The process-wide Date header clock, started once and never
		// stopped; startServerDate starts it outside any bubble.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// startServerDate's server's worker-pool cleaner, which sleeps out
		// its period before it notices the server stopped. The bubbles'
		// own housekeepers end inside their bubbles.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// startServerDate serves one request before any test runs. A fasthttp
// Server starts the process-wide goroutine that refreshes its Date header
// on its first request, once, and that goroutine never ends: started
// inside a testing/synctest bubble, it would keep the bubble alive
// forever and fail the test as deadlocked.
func startServerDate() error {
	ln := fasthttputil.NewInmemoryListener()
	quiet := zerolog.Nop()
	srv := &fasthttp.Server{Handler: func(*fasthttp.RequestCtx) {}, Logger: &quiet}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c, err := ln.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: warm\r\n\r\n")); err != nil {
		return err
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		return fmt.Errorf("cannot start fasthttp's date clock: %w", err)
	}
	if err := srv.Shutdown(); err != nil {
		return err
	}
	return <-done
}
