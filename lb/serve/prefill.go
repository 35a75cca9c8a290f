package serve

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// prefillFlags collects --prefill URL [PORT]. As in mini_lb's argparse
// (nargs="+"), the port token is optional, so the type reads kong's scanner
// itself: it takes the next token too when that is a port or "none".
// From the environment, PDLB_PREFILL holds "URL [PORT]" entries separated by
// commas.
type prefillFlags []lb.PrefillSpec

func (p *prefillFlags) Decode(ctx *kong.DecodeContext) error {
	tok, err := ctx.Scan.PopValue("prefill URL")
	if err != nil {
		return err
	}
	raw := fmt.Sprint(tok.Value)
	if strings.ContainsAny(raw, ", ") {
		return p.decodeList(raw)
	}
	spec := lb.PrefillSpec{URL: raw}
	if next := ctx.Scan.Peek(); isBootstrapPortToken(next) {
		ctx.Scan.Pop()
		port, err := parseBootstrapPort(raw, fmt.Sprint(next.Value))
		if err != nil {
			return err
		}
		spec.BootstrapPort = port
	}
	*p = append(*p, spec)
	return nil
}

// isBootstrapPortToken reports whether tok, the one after a prefill URL,
// is its bootstrap port: anything but a flag. Serve takes no positional
// arguments, so a token that is not a flag can only be the port, and a bad
// one is a bad port. A hyphen and a digit is a negative number, as
// argparse reads it, not a short flag.
func isBootstrapPortToken(tok kong.Token) bool {
	if tok.IsValue() {
		return true
	}
	s, ok := tok.Value.(string)
	return ok && tok.Type == kong.UntypedToken && len(s) > 1 && s[0] == '-' && s[1] >= '0' && s[1] <= '9'
}

func (p *prefillFlags) decodeList(list string) error {
	for _, entry := range strings.Split(list, ",") {
		fields := strings.Fields(entry)
		switch len(fields) {
		case 0:
			continue
		case 1:
			*p = append(*p, lb.PrefillSpec{URL: fields[0]})
		case 2:
			port, err := parseBootstrapPort(fields[0], fields[1])
			if err != nil {
				return err
			}
			*p = append(*p, lb.PrefillSpec{URL: fields[0], BootstrapPort: port})
		default:
			return fmt.Errorf("invalid prefill %q: want URL [PORT|none]", entry)
		}
	}
	return nil
}

// parseBootstrapPort reads the token after the prefill URL url: a port, or
// "none" (port 0). The error names both, as sglang_router's
// _parse_prefill_urls does ("Invalid bootstrap port: abc. Must be a number
// or 'none'").
func parseBootstrapPort(url, s string) (int, error) {
	if strings.EqualFold(s, "none") {
		return 0, nil
	}
	if n, ok := cli.ParsePort(s); ok {
		return n, nil
	}
	return 0, fmt.Errorf("invalid bootstrap port %q for prefill %s: expected %s, or none", s, url, cli.WantPort)
}
