package main

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// maxReadmeLines keeps the README to about a screenful of sections
// (issue 20: it had grown to 860 lines); the detail belongs in the
// packages' documentation, which `go doc` shows.
const maxReadmeLines = 260

// TestReadmeFitsAndLinksStayInTheRepository checks what issue 20 asked of
// the README: at most about 250 lines, and no link that a fresh clone
// cannot follow (it pointed to files outside the repository).
func TestReadmeFitsAndLinksStayInTheRepository(t *testing.T) {
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines; want at most %d: move the detail into a package's doc.go", n, maxReadmeLines)
	}
	for _, problem := range readmeLinkProblems(string(text), fileExists) {
		t.Error(problem)
	}
}

func TestReadmeLinkProblems(t *testing.T) {
	f := func(markdown string, want ...string) {
		t.Helper()
		exists := func(p string) bool { return p == "scripts/demo.sh" || p == "lb" }
		got := readmeLinkProblems(markdown, exists)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("readmeLinkProblems(%q) = %q; want %q", markdown, got, want)
		}
	}
	f("# Quick start\nSee [the demo](scripts/demo.sh), [lb](./lb/) and [above](#quick-start).\n")
	f("[SGLang](https://github.com/sgl-project/sglang)",
		`link "https://github.com/sgl-project/sglang" points outside the repository`)
	f("See <https://example.com/x>.", `link "https://example.com/x" points outside the repository`)
	f("[design](../shared/DESIGN.md)", `link "../shared/DESIGN.md" points outside the repository`)
	f("The design is in `../shared/DESIGN.md`.", `link "../shared/DESIGN.md" points outside the repository`)
	f("[abs](/etc/passwd)", `link "/etc/passwd" points outside the repository`)
	f("[gone](scripts/gone.sh#top)", `link "scripts/gone.sh#top": scripts/gone.sh does not exist`)
	f("# Routes\n[x](#flags)", `link "#flags": no heading of README.md has that anchor`)
	f("[ref]: http://example.com", `link "http://example.com" points outside the repository`)
	f("```sh\ncurl http://127.0.0.1:8000/generate\n[x](http://in.code/block)\n```\n`[y](http://in.code)`")
	f("## Migrating from mini_lb\n[m](#migrating-from-mini_lb)")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var (
	inlineLink  = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink     = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	autoLink    = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]+)>`)
	codeSpan    = regexp.MustCompile("`[^`]*`")
	parentPath  = regexp.MustCompile("^`(\\.\\.?/[^`]*)`$")
	urlScheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	notInAnchor = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// readmeLinkProblems lists the links of markdown that a clone of the
// repository cannot follow: any URL, a path leaving the repository, a
// file that does not exist, a #anchor that no heading has. A path in
// inline code that starts with ./ or ../ counts as a link, as a reader
// follows it. exists reports whether a path of the repository exists.
func readmeLinkProblems(markdown string, exists func(string) bool) []string {
	var targets []string
	anchors := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[headingAnchor(heading)] = true
		}
		for _, span := range codeSpan.FindAllString(line, -1) {
			if m := parentPath.FindStringSubmatch(span); m != nil {
				targets = append(targets, m[1])
			}
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, re := range []*regexp.Regexp{inlineLink, refLink, autoLink} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				targets = append(targets, m[1])
			}
		}
	}
	var problems []string
	for _, target := range targets {
		if problem := linkProblem(target, anchors, exists); problem != "" {
			problems = append(problems, problem)
		}
	}
	return problems
}

func linkProblem(target string, anchors map[string]bool, exists func(string) bool) string {
	file, anchor, _ := strings.Cut(target, "#")
	switch {
	case urlScheme.MatchString(target) || strings.HasPrefix(target, "//") || strings.HasPrefix(file, "/"):
		return `link "` + target + `" points outside the repository`
	case file == "":
		if !anchors[anchor] {
			return `link "` + target + `": no heading of README.md has that anchor`
		}
		return ""
	}
	clean := path.Clean(file)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return `link "` + target + `" points outside the repository`
	}
	if !exists(clean) {
		return `link "` + target + `": ` + clean + " does not exist"
	}
	return ""
}

// headingAnchor is GitHub's anchor of a heading: lower case, punctuation
// dropped, spaces made hyphens.
func headingAnchor(heading string) string {
	heading = codeSpan.ReplaceAllStringFunc(heading, func(s string) string { return strings.Trim(s, "`") })
	heading = notInAnchor.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
	return strings.ReplaceAll(heading, " ", "-")
}
