package serve

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/lb/cli"
)

// workerURLExamples are serve's flags that take a worker URL, each with a
// line that gives one, for the error of a line that gives none. kong's own
// error said `expected prefill URL value but got "EOL" (<EOL>)`, or
// suggested --prefill="--decode" for a URL left out before another flag.
var workerURLExamples = map[string]string{
	"prefill":  "--prefill http://10.0.0.1:30000 8998",
	"decode":   "--decode http://10.0.0.2:30010",
	"fallback": "--fallback http://10.0.0.3:30000",
}

// checkWorkerURLs refuses a serve command line where a worker flag has no
// URL after it: it ends the line, comes before another flag, or is empty
// after "=". A tool's arguments are its own.
func checkWorkerURLs(parser *kong.Kong, args []string) error {
	if len(args) > 0 && isOtherCommand(parser, args[0]) {
		return nil
	}
	for i, arg := range args {
		if arg == "--" {
			return nil
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		example, ok := workerURLExamples[name]
		if !ok || !strings.HasPrefix(arg, "--") {
			continue
		}
		if hasValue && value == "" || !hasValue && (i+1 == len(args) || strings.HasPrefix(args[i+1], "-")) {
			return cli.UsageError{Err: fmt.Errorf("--%s needs a worker URL, e.g. %s", name, example)}
		}
	}
	return nil
}
