package cli

import "errors"

// UsageError is a command line that pdlb cannot run: an unknown flag, a
// bad value, a missing worker. It exits with status 2, as mini_lb's
// argparse does, so that a script can tell it from a failure at run time
// (status 1).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }

// ExitCode is the status kong exits with.
func (UsageError) ExitCode() int { return 2 }

func (e UsageError) Unwrap() error { return e.Err }

// ExitCode is the status pdlb exits with after a command returned err, as
// kong's FatalIfErrorf decides it: the error's own ExitCode if it has one,
// 1 for any other error, 0 for none.
func ExitCode(err error) int {
	var e interface{ ExitCode() int }
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}
