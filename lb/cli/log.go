package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// LogFlags are shared by every command that logs.
type LogFlags struct {
	LogLevel  string `help:"Log level: debug, info, warn (or warning) or error (or critical)." default:"info" enum:"debug,info,warn,warning,error,critical"`
	LogFormat string `help:"Log format: json, or console for people." default:"json" enum:"json,console"`
}

// logTimeFormat is RFC 3339 to the millisecond: lines of one second
// (an ejection, the retry it caused, their access lines) must sort.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Logger builds the root logger all components derive theirs from.
func (f *LogFlags) Logger(w io.Writer) zerolog.Logger {
	// zerolog's time format is a process global; only a command sets it.
	zerolog.TimeFieldFormat = logTimeFormat
	if f.LogFormat == "console" {
		// Colour codes are for a terminal; in a file they are noise.
		file, ok := w.(*os.File)
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !ok || !IsTerminal(file)}
	}
	// warning and critical are sglang_router's names.
	level, err := zerolog.ParseLevel(strings.NewReplacer("warning", "warn", "critical", "error").Replace(f.LogLevel))
	if err != nil {
		panic(fmt.Sprintf("BUG: kong let through log level %q", f.LogLevel))
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// IsTerminal reports whether f is a terminal, where a redrawn progress line
// or colour makes sense (in a log file they are noise). It asks the
// terminal driver, as the file's mode would call /dev/null one too.
func IsTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd())
}
