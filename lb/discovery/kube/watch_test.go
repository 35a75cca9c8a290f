package kube

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// A list that succeeds between watches that fail (a Role without
// "watch") does not end the failure: the log says it once, and the gauge
// does not flap. A watch that starts ends it.
func TestOnlyAWatchEndsAFailure(t *testing.T) {
	var buf bytes.Buffer
	s := &Source{cfg: Config{Log: zerolog.New(&buf)}}
	rw := &roleWatch{}
	refused := errors.New(`pods is forbidden: cannot watch resource "pods"`)
	ctx := context.Background()
	for range 3 {
		s.noteCall(ctx, rw, nil, false)
		s.noteCall(ctx, rw, refused, true)
	}
	if !rw.failing.Load() || strings.Count(buf.String(), `"level":"warn"`) != 1 || strings.Contains(buf.String(), "answers again") {
		t.Errorf("watches refused, lists answered: failing %v, log %s; want failing, warned once", rw.failing.Load(), buf.String())
	}
	s.noteCall(ctx, rw, nil, true)
	if rw.failing.Load() || !strings.Contains(buf.String(), "answers again") {
		t.Errorf("a watch started: failing %v, log %s; want the failure ended, and said", rw.failing.Load(), buf.String())
	}
}
