package doccheck_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestCitations scans every tracked text file for citations of the design
// documents and fails, naming file:line, for each one that points nowhere:
//
//   - a section "§n" that docs/design.md lacks. A "§n" cites docs/design.md
//     unless another document is named right before it ("docs/protocol.md
//     §3"), after it ("§3 of docs/protocol.md") or before the list or range
//     it continues ("§2, §3", "§2–§4"); a section of another document must
//     be one of its numbered headings ("## 3. …");
//   - an invariant I1…, checker rule C1… or scenario S1… (also inside test
//     names, TestX_I3_S13) that docs/design.md (I) or docs/test-plan.md (C,
//     S) does not define in its table;
//   - any citation of the briefs the repository grew from, which live
//     outside it: those must cite docs/design.md or docs/test-plan.md.
//
// The raw benchmark outputs under docs/bench, go.sum files and binaries
// are not scanned.
func TestCitations(t *testing.T) {
	root := repoRoot(t)
	d := loadDocs(t, root)
	var problems []string
	var files, sections, ids int
	for _, name := range trackedFiles(t, root) {
		if strings.HasPrefix(name, "docs/bench/") || strings.HasSuffix(name, ".sum") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			if os.IsNotExist(err) {
				continue // tracked, but deleted in this checkout
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		files++
		r := d.scan(name, string(data))
		problems = append(problems, r.problems...)
		sections += r.sections
		ids += r.ids
	}
	t.Logf("%d files, %d section citations, %d id citations", files, sections, ids)
	if files < 20 || sections < 10 || ids < 10 {
		t.Fatalf("scanned %d files with %d section and %d id citations: too few for the check to mean anything "+
			"(was the repository found at %s?)", files, sections, ids, root)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestDocumentsDefineEveryID: the documents define every id the code may
// cite, not only those cited today: §1–§13, I1–I7, C1–C8 and S1–S16.
func TestDocumentsDefineEveryID(t *testing.T) {
	d := loadDocs(t, repoRoot(t))
	for n := 1; n <= 13; n++ {
		if !d.design[n] {
			t.Errorf("docs/design.md has no section %d (a heading \"## %d. …\")", n, n)
		}
	}
	for _, r := range []struct {
		prefix string
		last   int
		doc    string
	}{{"I", 7, "docs/design.md"}, {"C", 8, "docs/test-plan.md"}, {"S", 16, "docs/test-plan.md"}} {
		for n := 1; n <= r.last; n++ {
			id := r.prefix + strconv.Itoa(n)
			if d.ids[id] != r.doc {
				t.Errorf("%s does not define %s (a table row \"| %s | …\")", r.doc, id, id)
			}
		}
	}
}

// TestScanCatchesMadeUpCitations: the scan reports citations that point
// nowhere and leaves the valid forms alone. The made-up citations are
// spelt in pieces so that this file itself cites nothing wrong.
func TestScanCatchesMadeUpCitations(t *testing.T) {
	d := loadDocs(t, repoRoot(t))
	s := "§"
	bad := []struct{ line, want string }{
		{"// see docs/design.md " + s + "99 for this", s + "99"},
		{"// (design " + s + "14)", s + "14"},
		{"// keeps " + s + "2, " + s + "40 and " + s + "3", s + "40"},
		{"// docs/protocol.md " + s + "1, " + s + "9", "protocol.md"},
		{"// " + s + "3 of docs/nosuch.md", "nosuch.md"},
		{"// I" + "8 holds", "I" + "8"},
		{"// checks C" + "9", "C" + "9"},
		{"func TestForged_S" + "17_I2(t *testing.T) {", "S" + "17"},
		{"// S" + "1–S" + "20 run in CI", "S" + "20"},
		{"// (DES" + "IGN " + s + "8)", "docs/design.md"},
		{"// see DES" + "IGN.md", "docs/design.md"},
		{"// TEST" + "-PLAN S13", "docs/test-plan.md"},
		{"// scenarios of TEST" + "-PLAN.md", "docs/test-plan.md"},
		{"// from ../" + "shared/notes", "inside the repository"},
		{"// (STY" + "LE: the store seam)", "brief"},
	}
	for _, b := range bad {
		r := d.scan("x.go", b.line)
		if len(r.problems) == 0 {
			t.Errorf("%q: not reported", b.line)
			continue
		}
		if !strings.Contains(strings.Join(r.problems, "\n"), b.want) {
			t.Errorf("%q: reported as %q, which does not mention %q", b.line, r.problems, b.want)
		}
		if !strings.HasPrefix(r.problems[0], "x.go:1: ") {
			t.Errorf("%q: reported as %q, without file:line", b.line, r.problems[0])
		}
	}
	good := []string{
		"// the status document (docs/design.md §8).",
		"// re-syncs (§5 step 1) from its checkpoint (design §5)",
		"// the promise of package backend (and of docs/design.md §2–§4, §9)",
		"// follows docs/protocol.md §3 with a plain NATS client",
		"// (§6 of docs/design.md) and checks it on every lead (§5)",
		"func TestAccessControl_S13_I2_I4(t *testing.T) {",
		"func TestNaiveSequenceSkips_I1NegativeControl(t *testing.T) {",
		"// checker C1–C8, scenarios S1–S16, invariants I1–I7",
		"| S1-postgres | 2 | 0 |",
		"// CSV, ISO8601, SHA256, x509, I18n, ICS, c5418db, 0xC1",
	}
	for _, g := range good {
		if r := d.scan("x.go", g); len(r.problems) > 0 {
			t.Errorf("%q: reported, but it is valid: %q", g, r.problems)
		}
	}
}

// outside are the briefs the repository was written from. They live outside
// it, so nobody reading the repository can open them. Their names are spelt
// in pieces so that this file does not match.
var outside = []struct {
	re  *regexp.Regexp
	fix string
}{
	{regexp.MustCompile(`\b` + "DES" + `IGN\b`), "cite docs/design.md"},
	{regexp.MustCompile(`\b` + "TEST" + `-PLAN\b`), "cite docs/test-plan.md"},
	{regexp.MustCompile(`\b` + "STY" + `LE(\.md\b|:| §)`), "a brief of the project's style; say it in the comment, or cite the repository's docs"},
	{regexp.MustCompile(`\.\./` + "shared" + `\b|/work/` + "shared" + `\b`), "cite a document inside the repository"},
}

var (
	// designHeading is a section of docs/design.md: "## 5. The publisher".
	designHeading = regexp.MustCompile(`(?m)^## (\d+)\. `)
	// numberedHeading is a numbered section of another document.
	numberedHeading = regexp.MustCompile(`(?m)^#{1,6} (\d+)\. `)
	// idRow defines an id: a table row that starts with it.
	idRow = regexp.MustCompile(`(?m)^\| ([ICS]\d+) \|`)
	// docBefore: a document named right before "§n".
	docBefore = regexp.MustCompile(`([A-Za-z0-9_./-]+\.md)\s*$`)
	// designBefore: "design §n", "docs/design §n" and the brief's spelling.
	designBefore = regexp.MustCompile(`(?i)(?:^|[^A-Za-z0-9_])design\s*$`)
	// docAfter: "§n of docs/protocol.md".
	docAfter = regexp.MustCompile(`^\s+of\s+([A-Za-z0-9_./-]+\.md)\b`)
)

const designDoc = "docs/design.md"

type docs struct {
	root   string
	design map[int]bool
	// ids maps each defined id to the document that defines it.
	ids map[string]string
	// other holds the numbered sections of other documents, by path.
	other map[string]map[int]bool
}

func loadDocs(t *testing.T, root string) *docs {
	t.Helper()
	d := &docs{root: root, design: map[int]bool{}, ids: map[string]string{}, other: map[string]map[int]bool{}}
	design := readDoc(t, root, designDoc)
	for _, m := range designHeading.FindAllStringSubmatch(design, -1) {
		n, _ := strconv.Atoi(m[1])
		d.design[n] = true
	}
	for _, src := range []struct{ doc, prefixes string }{{designDoc, "I"}, {"docs/test-plan.md", "CS"}} {
		for _, m := range idRow.FindAllStringSubmatch(readDoc(t, root, src.doc), -1) {
			if strings.Contains(src.prefixes, m[1][:1]) {
				d.ids[m[1]] = src.doc
			}
		}
	}
	return d
}

func readDoc(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("the citations' document: %v", err)
	}
	return string(b)
}

type scanResult struct {
	problems      []string
	sections, ids int
}

// scan checks the citations in one file's text.
func (d *docs) scan(name, text string) scanResult {
	var r scanResult
	for i, line := range strings.Split(text, "\n") {
		at := fmt.Sprintf("%s:%d", name, i+1)
		for _, o := range outside {
			if m := o.re.FindString(line); m != "" {
				r.problems = append(r.problems, fmt.Sprintf("%s: %q cites a brief that is not in the repository: %s", at, m, o.fix))
			}
		}
		for _, c := range sectionCitations(line) {
			r.sections++
			if msg := d.checkSection(name, c); msg != "" {
				r.problems = append(r.problems, at+": "+msg)
			}
		}
		for _, id := range idCitations(line) {
			r.ids++
			if d.ids[id] == "" {
				r.problems = append(r.problems, fmt.Sprintf("%s: %s is cited, but neither docs/design.md (I…) nor docs/test-plan.md (C…, S…) defines it", at, id))
			}
		}
	}
	return r
}

// section is one "§n" and the document it cites ("" for docs/design.md).
type section struct {
	doc string
	n   int
}

// sectionCitations finds the "§n" of a line and the document each cites.
func sectionCitations(line string) []section {
	var out []section
	prevEnd := -1
	prevDoc := ""
	for i := 0; i < len(line); {
		j := strings.Index(line[i:], "§")
		if j < 0 {
			break
		}
		start := i + j
		k := start + len("§")
		if k < len(line) && line[k] == ' ' {
			k++
		}
		digits := k
		for k < len(line) && line[k] >= '0' && line[k] <= '9' {
			k++
		}
		i = k
		if k == digits {
			i = start + len("§")
			continue
		}
		n, _ := strconv.Atoi(line[digits:k])
		before := line[:start]
		doc := ""
		switch {
		case docBefore.MatchString(before):
			doc = docBefore.FindStringSubmatch(before)[1]
		case designBefore.MatchString(before):
		case docAfter.MatchString(line[k:]):
			doc = docAfter.FindStringSubmatch(line[k:])[1]
		case prevEnd >= 0 && continues(line[prevEnd:start]):
			doc = prevDoc
		}
		if path.Base(doc) == "design.md" {
			doc = ""
		}
		out = append(out, section{doc: doc, n: n})
		prevEnd, prevDoc = k, doc
	}
	return out
}

// continues reports whether the text between two "§n" makes the second one
// part of the first one's list or range: "§2, §3", "§2–§4", "§2 and §3".
func continues(gap string) bool {
	g := strings.Trim(gap, " ,;–-")
	return g == "" || g == "and" || g == "or" || g == "to"
}

func (d *docs) checkSection(file string, c section) string {
	if c.doc == "" {
		if !d.design[c.n] {
			return fmt.Sprintf("§%d is cited, but docs/design.md has no section %d", c.n, c.n)
		}
		return ""
	}
	sections, where := d.sectionsOf(file, c.doc)
	if sections == nil {
		return fmt.Sprintf("§%d of %s is cited, but %s is not in the repository", c.n, c.doc, c.doc)
	}
	if !sections[c.n] {
		return fmt.Sprintf("§%d of %s is cited, but %s has no numbered section %d", c.n, c.doc, where, c.n)
	}
	return ""
}

// sectionsOf reads the numbered sections of a document cited from file:
// relative to file's directory, to the repository, or in docs/. Nil when it
// is none of them.
func (d *docs) sectionsOf(file, doc string) (map[int]bool, string) {
	for _, p := range []string{path.Join(path.Dir(file), doc), path.Clean(doc), path.Join("docs", path.Base(doc))} {
		if s, ok := d.other[p]; ok {
			return s, p
		}
		b, err := os.ReadFile(filepath.Join(d.root, filepath.FromSlash(p)))
		if err != nil {
			continue
		}
		s := map[int]bool{}
		for _, m := range numberedHeading.FindAllStringSubmatch(string(b), -1) {
			n, _ := strconv.Atoi(m[1])
			s[n] = true
		}
		d.other[p] = s
		return s, p
	}
	return nil, ""
}

// idCitations finds the ids of a line: I, C or S and digits, not inside a
// word (so "x509" and "c5418db" are not ids), but after an underscore and
// before a capital letter (test names: TestX_I1NegativeControl_S13).
func idCitations(line string) []string {
	var out []string
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c != 'I' && c != 'C' && c != 'S' || i > 0 && isAlnum(line[i-1]) {
			continue
		}
		j := i + 1
		for j < len(line) && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		if j == i+1 || j < len(line) && line[j] >= 'a' && line[j] <= 'z' {
			continue
		}
		out = append(out, line[i:j])
		i = j - 1
	}
	return out
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// repoRoot is the module's root: the nearest directory above with a go.mod
// of module github.com/orisun-io/orisun.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/orisun-io/orisun\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of github.com/orisun-io/orisun above the working directory")
		}
		dir = parent
	}
}

// trackedFiles lists the files git tracks, with slashes, relative to root.
// Without git (a source archive) it walks the tree instead, leaving out
// hidden directories.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err == nil {
		var names []string
		for _, n := range strings.Split(string(out), "\x00") {
			if n != "" {
				names = append(names, n)
			}
		}
		return names
	}
	t.Logf("git ls-files: %v; walking the tree instead", err)
	var names []string
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && p != root && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
