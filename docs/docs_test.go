// Package docs_test checks the documentation against itself and against the
// code: links and anchors resolve, every page has a table of contents, the
// README stays a front page, the references (errors.md,
// configuration.md) list everything the server can send or read, and the
// recovery machine's diagram (architecture.md) every transition reason.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, relative to this package.
const root = ".."

// page is one markdown file: its path from the root and its text.
type page struct {
	path string
	text string
}

// readPage reads the markdown file at path (from the root).
func readPage(t *testing.T, path string) page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return page{path: path, text: string(b)}
}

// skipDirs are never walked for markdown or Go files: generated, vendored,
// installed or built.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "third_party": true, "bin": true, "dist": true, ".venv": true}

// markdownFiles are the repository's markdown files, README.md and docs/
// among them, with paths from the root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "docs/api.md", "docs/errors.md", "docs/configuration.md"} {
		if !slices.Contains(out, must) {
			t.Fatalf("%s is missing", must)
		}
	}
	return out
}

// docPages are README.md and docs/*.md.
func docPages(t *testing.T) []page {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []page{readPage(t, "README.md")}
	for _, n := range names {
		rel, _ := filepath.Rel(root, n)
		pages = append(pages, readPage(t, filepath.ToSlash(rel)))
	}
	return pages
}

// prose is text with its fenced code blocks blanked out (lines kept, so
// that line numbers still hold).
func prose(text string) string {
	var b strings.Builder
	fence := ""
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			b.WriteString("\n")
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			b.WriteString("\n")
		case fence != "":
			b.WriteString("\n")
		default:
			b.WriteString(line)
		}
	}
	return b.String()
}

// heading is one ATX heading of a page.
type heading struct {
	level int
	text  string
}

var headingLine = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// headings are the headings of text, outside code blocks.
func headings(text string) []heading {
	var out []heading
	for line := range strings.Lines(prose(text)) {
		if m := headingLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			out = append(out, heading{level: len(m[1]), text: m[2]})
		}
	}
	return out
}

var (
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]*)\)`)
	emphasis   = regexp.MustCompile("[`*]")
)

// slug is the anchor GitHub gives a heading: its text without markup,
// lower-cased, every character but letters, digits, '_', '-' and spaces
// dropped, spaces made hyphens.
func slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	text = emphasis.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || r == '_' || r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the anchors of text's headings, duplicates numbered as GitHub
// numbers them.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headings(text) {
		s := slug(h.text)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var inlineCode = regexp.MustCompile("`[^`\n]*`")

// links are the targets of the inline links of text, outside code.
func links(text string) []string {
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(prose(text), "``"), -1) {
		out = append(out, m[2])
	}
	return out
}

// TestLinksResolve: every relative link of every markdown file points at a
// file or folder that exists, and an anchor at a heading of its page.
func TestLinksResolve(t *testing.T) {
	for _, path := range markdownFiles(t) {
		p := readPage(t, path)
		for _, target := range links(p.text) {
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(path), file))
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", path, target, dest)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchors(readPage(t, dest).text)[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", path, target, dest, anchor)
			}
		}
	}
}

// designFiles matches a path to the maintainers' design notes, which sit
// beside the repository and not in it. The brackets keep the pattern from
// being such a path itself, so that a search of the repository for one
// finds none.
const designFiles = `\.\.[/]shared[/]|DESIGN[.]md`

// TestNoPrivateReferences: the documentation and the sources name nothing
// that only the project's maintainers have: no design file outside the
// repository, no tracker numbers in user text.
func TestNoPrivateReferences(t *testing.T) {
	private := regexp.MustCompile(`(?i)` + designFiles + `|\bissues?[- ]\d+|\bissue \d+`)
	for _, path := range markdownFiles(t) {
		p := readPage(t, path)
		for i, line := range strings.Split(p.text, "\n") {
			if m := private.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: users cannot follow it", path, i+1, m)
			}
		}
	}
	// The sources, configuration and scripts: no design file users lack.
	design := regexp.MustCompile(designFiles)
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin" || name == "dist" || name == "gen") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") || !sourceFile(name) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := design.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: users cannot follow it", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sourceFile reports whether name is a file of code, configuration or
// script that a reader of the repository opens.
func sourceFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".yaml", ".yml", ".proto", ".py", ".ts", ".mjs", ".js", ".sh", ".json", ".toml":
		return true
	}
	return name == "Makefile" || name == "Containerfile" || name == "Containerfile.local" || name == "run" || name == "with-server"
}

// TestPagesHaveContents: every page of docs/ lists each of its sections
// (its "##" headings) in a table of contents before the first of them.
func TestPagesHaveContents(t *testing.T) {
	for _, p := range docPages(t) {
		if p.path == "README.md" {
			continue
		}
		text := prose(p.text)
		first := strings.Index(text, "\n## ")
		if first < 0 {
			t.Errorf("%s has no sections", p.path)
			continue
		}
		toc := text[:first]
		for _, h := range headings(p.text) {
			if h.level == 2 && !strings.Contains(toc, "(#"+slug(h.text)+")") {
				t.Errorf("%s: section %q is not in the contents before the first section", p.path, h.text)
			}
		}
	}
}

// TestReadmeIsAFrontPage: the README stays short, with its architecture
// section short too, and indexes every page of docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	readme := readPage(t, "README.md")
	if n := strings.Count(readme.text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move the details to docs/", n)
	}
	lines := strings.Split(readme.text, "\n")
	start := slices.Index(lines, "## Architecture")
	if start < 0 {
		t.Fatal("README.md has no ## Architecture section")
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	if n := end - start; n > 40 {
		t.Errorf("README.md's Architecture section has %d lines, want at most 40", n)
	}
	for _, p := range docPages(t) {
		if p.path != "README.md" && !slices.Contains(links(readme.text), p.path) {
			t.Errorf("README.md's index does not link %s", p.path)
		}
	}
}
