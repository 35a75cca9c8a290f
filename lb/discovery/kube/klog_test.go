package kube

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// client-go's key-value errors reach pdlb's log with their text, in the
// message's fields and in a logger's values alike.
func TestLoggerKeepsErrorText(t *testing.T) {
	var buf bytes.Buffer
	log := Logger(zerolog.New(&buf).Level(zerolog.DebugLevel))
	log.Info("watch ended with error", "err", errors.New("connection refused"))
	log.WithValues("cause", errors.New("forbidden")).Info("listing pods")
	out := buf.String()
	for _, want := range []string{`"err":"connection refused"`, `"cause":"forbidden"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s; want %s", out, want)
		}
	}
}
