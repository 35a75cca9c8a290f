package main

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/internal/cli"
)

// `pdlb help [COMMAND]` prints what `pdlb [COMMAND] --help` prints, as `go
// help` and `kubectl help` do. serve is the default command, so kong took
// "help" for a stray argument of serve's ("unexpected argument help").

// helpArgs returns args with `help [COMMAND]` rewritten as `[COMMAND]
// --help`, and any other args unchanged. A topic that is not a command of
// parser is a usage error that lists them.
func helpArgs(parser *kong.Kong, args []string) ([]string, error) {
	if len(args) == 0 || args[0] != "help" {
		return args, nil
	}
	if len(args) == 1 {
		return []string{"--help"}, nil
	}
	var names []string
	for _, child := range parser.Model.Children {
		if child.Name == args[1] && len(args) == 2 {
			return []string{child.Name, "--help"}, nil
		}
		names = append(names, child.Name)
	}
	if len(args) > 2 {
		return nil, cli.UsageError{Err: fmt.Errorf("help takes one command at most: pdlb help [%s]", strings.Join(names, "|"))}
	}
	return nil, cli.UsageError{Err: fmt.Errorf("no help for %q: pdlb's commands are %s", args[1], strings.Join(names, ", "))}
}
