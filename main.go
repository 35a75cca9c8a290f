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
	"pdlb/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commands is pdlb's command line. serve is the default command, so the mini_lb
// line `pdlb --prefill URL --decode URL` needs no subcommand.
type commands struct {
	Serve   serveCmd         `cmd:"" default:"withargs" help:"Run the load balancer (the default command)."`
	Fake    fake.Command     `cmd:"" help:"Run fake SGLang servers (prefill, decode, aggregated) for tests and demos."`
	Bench   bench.Command    `cmd:"" help:"Send load to an endpoint and report throughput and latency."`
	Relay   relay.Command    `cmd:"" help:"Pipe TCP connections to one address with nothing on the way: the floor of any proxy, a baseline for benchmarks."`
	Pair    pair.Command     `cmd:"" help:"Pair one prefill and one decode with nothing else (no health checks, metrics, retries; streams passed on as read): a baseline for benchmarks."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

// ignoredFlags are the sglang_router flags removed before parsing, bound
// into the commands' Run so serve can warn about them.
type ignoredFlags []string

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
	err = kctx.Run(ignoredFlags(ignored), cli.Exit(exit))
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

func newParser(c *commands, stdout, stderr io.Writer, options ...kong.Option) (*kong.Kong, error) {
	return kong.New(c, slices.Concat([]kong.Option{
		kong.Name("pdlb"),
		kong.Description("A fast load balancer for SGLang prefill/decode disaggregation, and a drop-in for mini_lb:\n" +
			"  pdlb --prefill http://P:30000 [BOOTSTRAP_PORT] --decode http://D:30010 --host 0.0.0.0 --port 8000\n" +
			"Every flag can also be set by environment variable: PDLB_<FLAG> (e.g. PDLB_REQUEST_TIMEOUT_SECS)."),
		envars(),
		kong.Vars{"version": version},
		kong.Writers(stdout, stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
		kong.ExplicitGroups(serveGroups()),
		kong.ValueFormatter(helpValue),
	}, cli.NumberMappers(), options)...)
}

// envars names each flag's environment variable: PDLB_<FLAG> for the load
// balancer, PDLB_<COMMAND>_<FLAG> for the tools, so that `pdlb --prefill` and
// `pdlb fake --prefill` do not read the same variable.
func envars() kong.Option {
	set := func(f *kong.Flag, parts ...string) {
		if f.Name == "help" || f.Name == "version" {
			// Not settings: PDLB_VERSION, a common image label, would
			// otherwise make every run print the version and exit.
			f.Envs, f.Tag.Envs = nil, nil
			return
		}
		env := strings.ToUpper(strings.ReplaceAll(strings.Join(append(parts, f.Name), "_"), "-", "_"))
		f.Envs = []string{env}
		f.Tag.Envs = f.Envs
	}
	return kong.PostBuild(func(k *kong.Kong) error {
		for _, f := range k.Model.Flags {
			set(f, "pdlb")
		}
		for _, cmd := range k.Model.Children {
			for _, f := range cmd.Flags {
				if cmd.Name == "serve" {
					set(f, "pdlb")
				} else {
					set(f, "pdlb", cmd.Name)
				}
			}
		}
		return nil
	})
}
