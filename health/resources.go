package health

import (
	"errors"
	"syscall"
)

// OutOfResources reports whether err says that pdlb itself, or its machine,
// ran out of what it needs to make a connection: file descriptors (EMFILE
// for the process, ENFILE for the system), socket buffers (ENOBUFS),
// kernel memory (ENOMEM) or local ports (EADDRNOTAVAIL: every ephemeral
// port is taken, as a flood of short connections leaves them in
// TIME_WAIT). Such a failure happens before any byte reaches the target,
// so it says nothing of the target's health. Under a flood of client
// connections a probe that counted it would take every healthy worker
// out, and keep them out for Rise rounds after the flood.
func OutOfResources(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
