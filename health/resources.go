package health

import (
	"errors"
	"syscall"
)

// OutOfResources reports whether err says that pdlb itself, or its machine,
// ran out of what it needs to make a connection: file descriptors (EMFILE
// for the process, ENFILE for the system), socket buffers (ENOBUFS) or
// kernel memory (ENOMEM). Such a failure happens before any byte reaches the
// target, so it says nothing of the target's health. Under a flood of
// client connections a probe that counted it would take every healthy
// worker out, and keep them out for Rise rounds after the flood (issue 19).
func OutOfResources(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
