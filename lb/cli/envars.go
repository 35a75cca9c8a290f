package cli

import (
	"strings"

	"github.com/alecthomas/kong"
)

// Envars names each flag's environment variable: PDLB_<FLAG> for the flags
// of the command named unprefixed (the load balancer, the default command),
// PDLB_<COMMAND>_<FLAG> for the other commands' (the tools), so that `pdlb
// --prefill` and `pdlb fake --prefill` do not read the same variable.
func Envars(unprefixed string) kong.Option {
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
				if cmd.Name == unprefixed {
					set(f, "pdlb")
				} else {
					set(f, "pdlb", cmd.Name)
				}
			}
		}
		return nil
	})
}
