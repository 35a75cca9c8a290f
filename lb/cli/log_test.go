package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// JSON log lines are timed to the millisecond; console lines written to
// anything but a terminal carry no colour codes.
func TestLogFormats(t *testing.T) {
	var out bytes.Buffer
	log := (&LogFlags{LogLevel: "info", LogFormat: "json"}).Logger(&out)
	log.Info().Msg("a")
	if !regexp.MustCompile(`^\{"level":"info","time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)","message":"a"\}\n$`).Match(out.Bytes()) {
		t.Errorf("got %q; want a time to the millisecond", out.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// sglang_router's level names: warning is warn, critical error.
	out.Reset()
	log = (&LogFlags{LogLevel: "critical", LogFormat: "json"}).Logger(&out)
	log.Warn().Msg("hidden")
	log.Error().Msg("shown")
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), "shown") {
		t.Errorf("--log-level critical logged %q; want errors only", out.String())
	}

	log = (&LogFlags{LogLevel: "info", LogFormat: "console"}).Logger(f)
	log.Warn().Str("k", "v").Msg("b")
	written, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(written, []byte("\x1b[")) || !bytes.Contains(written, []byte("WRN b k=v")) {
		t.Errorf("got %q; want a console line without colour codes", written)
	}
}
