package serve

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"pdlb/lb"
)

// serveHelp returns what `pdlb serve --help` prints.
func serveHelp(t *testing.T) (help string) {
	t.Helper()
	var c root
	var out bytes.Buffer
	type exited struct{ code int }
	parser, err := newParser(&c, &out, &out, kong.Exit(func(code int) { panic(exited{code}) }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// kong exits once it has printed the help; the panic above stops
		// it there, as os.Exit would.
		r := recover()
		if r == nil {
			return // it did not exit: t.Fatalf below
		}
		if e, ok := r.(exited); !ok || e.code != 0 {
			panic(r)
		}
		help = out.String()
	}()
	_, err = parser.Parse([]string{"serve", "--help"})
	t.Fatalf("serve --help did not exit: %v", err)
	return ""
}

// Every serve flag is under one of serveGroups' headings, so that a flag
// added without a group tag (or with a key serveGroups lacks) fails here,
// not in a user's help (issue 20: 186 lines in one flat list).
func TestEveryServeFlagHasAGroup(t *testing.T) {
	var c root
	parser, err := newParser(&c, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, g := range serveGroups() {
		keys[g.Key] = true
	}
	for name, f := range serveFlagNames(parser) {
		switch {
		case name == "help" || name == "version":
			// pdlb's own, shared by every command: kong lists them first.
		case f.Group == nil:
			t.Errorf("--%s has no group: give it a group tag, one of serveGroups' keys", name)
		case !keys[f.Group.Key]:
			t.Errorf("--%s is in group %q, which serveGroups does not define", name, f.Group.Key)
		}
	}
}

// The help shows each group's heading and description, in serveGroups'
// order, and each flag once, under its group's heading.
func TestServeHelpIsGrouped(t *testing.T) {
	help := serveHelp(t)
	var c root
	parser, err := newParser(&c, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	order, text, flagHeading := readHelp(help)
	want := []string{"Flags:"} // kong's, for --help and --version
	for _, g := range serveGroups() {
		want = append(want, g.Title)
		if !strings.Contains(strings.Join(strings.Fields(text[g.Title]), " "), g.Description) {
			t.Errorf("heading %q without its description %q", g.Title, g.Description)
		}
	}
	if !slices.Equal(order, want) {
		t.Errorf("got headings %q; want %q", order, want)
	}
	for name, f := range serveFlagNames(parser) {
		want := "Flags:"
		if f.Group != nil {
			want = f.Group.Title
		}
		if got := flagHeading[name]; len(got) != 1 || got[0] != want {
			t.Errorf("--%s shows under %q; want once, under %q", name, got, want)
		}
	}
	if strings.Contains(help, "$PDLB_") {
		t.Errorf("the help names each flag's environment variable; want the rule said once:\n%s", help)
	}
}

// readHelp reads kong's help: its headings in order (lines that do not
// start with a space and end with a colon), the text under each, and for
// each flag the headings it shows under (a flag's line starts with its
// name, or for -h its short form, indented by two spaces).
func readHelp(help string) (order []string, text map[string]string, flagHeading map[string][]string) {
	text, flagHeading = map[string]string{}, map[string][]string{}
	heading := ""
	flagLine := regexp.MustCompile(`^  (?:-[a-z], |    )?--([a-z0-9-]+)`)
	for _, line := range strings.Split(help, "\n") {
		switch m := flagLine.FindStringSubmatch(line); {
		case line != "" && line[0] != ' ' && strings.HasSuffix(line, ":"):
			heading = line
			order = append(order, heading)
		case m != nil:
			flagHeading[m[1]] = append(flagHeading[m[1]], heading)
		case heading != "":
			text[heading] += line + "\n"
		}
	}
	return order, text, flagHeading
}

// The help of --policy and --prefill-dp-policy says what each policy does,
// so it names them in prose; it must name every one package lb implements,
// and --prefill-dp-policy's enum must be lb's list (issue 21: policy names
// listed once).
func TestPolicyHelpNamesEveryPolicy(t *testing.T) {
	var c root
	parser, err := newParser(&c, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	flags := serveFlagNames(parser)
	f := func(flag string, names []string) {
		t.Helper()
		for _, name := range names {
			if !strings.Contains(flags[flag].Help, name) {
				t.Errorf("--%s's help does not name policy %q: %q", flag, name, flags[flag].Help)
			}
		}
	}
	f("policy", lb.Policies())
	f("prefill-dp-policy", lb.DPPolicies())
	if got, want := flags["prefill-dp-policy"].EnumSlice(), lb.DPPolicies(); !slices.Equal(got, want) {
		t.Errorf("--prefill-dp-policy's enum: got %q; want %q", got, want)
	}
}
