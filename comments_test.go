package main

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outsideDocs are the documents that comments once sent readers to: the
// design, protocol, routing and style notes kept beside the repository, in
// ../shared/, which a clone does not have. A comment says what it needs
// instead: SGLang's source file and function, a package's documentation,
// or the fact itself.
var outsideDocs = []string{"PROTOCOL.md", "DESIGN.md", "ROUTING.md", "STYLE.md", "../shared/"}

// No comment of the repository's Go files names a document outside it
// (issue 20: some 60 did, from the fakes' doc to bootstrap's Registry).
func TestCommentsNameNoDocumentOutsideTheRepository(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != "." && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || path == "comments_test.go":
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, c := range commentsNaming(path, src, outsideDocs) {
			t.Errorf("%s:%d: a comment names %s, which a clone does not have: name SGLang's source file and function, "+
				"a package's documentation, or the fact itself", path, c.line, c.name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// namedInComment is a comment line that names one of the names looked for.
type namedInComment struct {
	line int
	name string
	text string // the comment's line
}

// commentsNaming returns the lines of the comments in the Go source src
// (from file path) that name one of names; string literals are not
// comments.
func commentsNaming(path string, src []byte, names []string) []namedInComment {
	var found []namedInComment
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(path, -1, len(src)), src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return found
		}
		if tok != token.COMMENT {
			continue
		}
		first := fset.Position(pos).Line
		for i, text := range strings.Split(lit, "\n") {
			for _, name := range names {
				if strings.Contains(text, name) {
					found = append(found, namedInComment{line: first + i, name: name, text: text})
				}
			}
		}
	}
}

func TestCommentsNaming(t *testing.T) {
	src := "package p\n\n// See PROTOCOL.md §4.\nvar a = \"DESIGN.md\" // as ../shared/ says\n/* one\n   STYLE.md */\n"
	got := commentsNaming("p.go", []byte(src), outsideDocs)
	want := []namedInComment{
		{3, "PROTOCOL.md", "// See PROTOCOL.md §4."},
		{4, "../shared/", "// as ../shared/ says"},
		{6, "STYLE.md", "   STYLE.md */"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %+v; want %+v", got[i], want[i])
		}
	}
}
