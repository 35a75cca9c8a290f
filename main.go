// Command pdlb is a load balancer for SGLang prefill/decode disaggregated
// serving, a drop-in replacement for sglang_router's mini_lb. It also ships
// the fake SGLang servers (pdlb fake), the load generator (pdlb bench), and
// the baselines it is measured against: a bare TCP relay (pdlb relay) and a
// featureless pairing proxy (pdlb pair).
//
// `pdlb [serve]` runs the load balancer; `serve` is the default command, so
// mini_lb's line needs none. `pdlb --help` (or `pdlb help`) lists the
// commands, `pdlb serve --help` (or `pdlb help serve`) the load balancer's
// flags by group. This package only wires the commands together: each
// lives in the package that does its work, the load balancer's command
// line (mini_lb's, the environment, its flags beyond their help) in
// package serve under lb (`go doc pdlb/lb/serve`), the load balancer
// itself in package lb, the tools in package bench and those under it.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/bench"
	"pdlb/bench/fake"
	"pdlb/bench/pair"
	"pdlb/bench/relay"
	"pdlb/lb/cli"
	"pdlb/lb/serve"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commands is pdlb's command line. serve is the default command, so the
// mini_lb line `pdlb --prefill URL --decode URL` needs no subcommand.
type commands struct {
	Serve   serve.Command    `cmd:"" default:"withargs" help:"Run the load balancer (the default command)."`
	Fake    fake.Command     `cmd:"" help:"Run fake SGLang servers (prefill, decode, aggregated) for tests and demos."`
	Bench   bench.Command    `cmd:"" help:"Send load to an endpoint and report throughput and latency."`
	Relay   relay.Command    `cmd:"" help:"Pipe TCP connections to one address with nothing on the way: the floor of any proxy, a baseline for benchmarks."`
	Pair    pair.Command     `cmd:"" help:"Pair one prefill and one decode with nothing else (no health checks, metrics, retries; streams passed on as read): a baseline for benchmarks."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	runMain(os.Args[1:], os.Stdout, os.Stderr, os.Exit)
}

// runMain is main with its arguments, output and exit given, for tests.
// exit ends the process; if it returns, so does runMain.
func runMain(args []string, stdout, stderr io.Writer, exit func(int)) {
	var c commands
	parser, err := newParser(&c, stdout, stderr, kong.Exit(exit))
	if err != nil {
		panic("BUG: invalid command line model: " + err.Error())
	}
	kctx, ignored, err := parseArgs(parser, &c, args)
	if err != nil {
		parser.Errorf("%s", err)
		fmt.Fprintln(parser.Stderr, usageHint(err))
		parser.Exit(cli.UsageError{}.ExitCode())
		return
	}
	err = kctx.Run(ignored, cli.Exit(exit), cli.Version(version))
	var ue cli.UsageError
	if errors.As(err, &ue) {
		// A command line the command itself refused, once parsed.
		parser.Errorf("%s", err)
		fmt.Fprintln(parser.Stderr, commandHint(kctx.Selected()))
		parser.Exit(ue.ExitCode())
		return
	}
	kctx.FatalIfErrorf(err)
}

// usageHint follows a command line kong refuses: a tool's error points to
// its own help. Serve is the default command, so its flags are not in the
// top-level help that `pdlb --help` prints.
func usageHint(err error) string {
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		return commandHint(pe.Context.Selected())
	}
	return commandHint(nil)
}

// commandHint points to the help of cmd, the command a refused command
// line selected (nil if none).
func commandHint(cmd *kong.Node) string {
	if cmd != nil && cmd.Name != "serve" {
		return fmt.Sprintf(`Run "pdlb %s --help" for its flags.`, cmd.Name)
	}
	return `Run "pdlb serve --help" for the load balancer's flags, "pdlb COMMAND --help" for a tool's.`
}

// newParser builds the parser of c, with options after pdlb's own.
func newParser(c *commands, stdout, stderr io.Writer, options ...kong.Option) (*kong.Kong, error) {
	return kong.New(c, slices.Concat([]kong.Option{
		kong.Name("pdlb"),
		kong.Description("A fast load balancer for SGLang prefill/decode disaggregation, and a drop-in for mini_lb:\n" +
			"  pdlb --prefill http://P:30000 [BOOTSTRAP_PORT] --decode http://D:30010 --host 0.0.0.0 --port 8000\n" +
			"Every flag can also be set by environment variable: PDLB_<FLAG> (e.g. PDLB_REQUEST_TIMEOUT_SECS)."),
		cli.Envars("serve"),
		kong.Vars{"version": version},
		kong.Writers(stdout, stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
	}, serve.Options(), cli.NumberMappers(), options)...)
}

// parseArgs parses args into c, the commands parser was built on: `help
// [COMMAND]` is `[COMMAND] --help` (helpArgs), and serve reads
// sglang_router's command line (serve.Parse), returning the flags it
// ignored.
func parseArgs(parser *kong.Kong, c *commands, args []string) (*kong.Context, serve.IgnoredFlags, error) {
	args, err := helpArgs(parser, args)
	if err != nil {
		return nil, nil, err
	}
	return serve.Parse(parser, &c.Serve, args)
}

// helpArgs returns args with `help [COMMAND]` rewritten as `[COMMAND]
// --help`, and any other args unchanged, so that `pdlb help [COMMAND]`
// prints what `pdlb [COMMAND] --help` prints, as `go help` and `kubectl
// help` do: serve is the default command, so kong took "help" for a stray
// argument of serve's ("unexpected argument help"). A topic that is not a
// command of parser is a usage error that lists them.
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
