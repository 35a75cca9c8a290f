package wire

import (
	"errors"
	"io"
	"syscall"

	"github.com/valyala/fasthttp"
)

// ErrStaleConn marks a request that died on a reused pooled connection
// before any response byte arrived: the worker had closed the idle
// connection. Such a request never reached the worker, so it is resent
// once on a fresh one (RetryStaleConn).
var ErrStaleConn = errors.New("pooled connection was closed by the worker")

// UnreachableError is the error of a call that could not connect to its
// worker: the request never reached it and may go to another worker.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err is a call's failure to connect.
func IsUnreachable(err error) bool {
	var u *UnreachableError
	return errors.As(err, &u)
}

// IsConnDrop reports whether err is the peer closing or resetting the
// connection before any response byte.
func IsConnDrop(err error) bool {
	return err == io.EOF || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsTimeout reports whether err is a timeout of any kind.
func IsTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &t) && t.Timeout()
}

// RetryStaleConn is the HostClient.RetryIfErr of the worker pools: only a
// request that never reached the worker is resent, and only once. Every
// other failure goes back to the caller, which knows whether a retry is
// safe.
func RetryStaleConn(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	return false, attempts == 1 && errors.Is(err, ErrStaleConn)
}
