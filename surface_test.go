package orisun_test

// The tests of this file guard orisun's stated public surface (see the
// package docs): which packages an application may import, that they do not
// pull orisun's machinery into its build or expose a machinery type, that
// every other package says it is machinery, and that no test hook shows in
// the public API.

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/orisun-io/orisun"

// publicPackages are the packages an application may import, relative to
// the module ("" is the root package). Everything else is machinery.
var publicPackages = []string{"", "api", "checkpoint", "client", "event", "outbox", "status", "stream"}

// machineryPrefixes are the packages a public package must neither import
// (directly or not; the root package excepted, it runs the node) nor name
// in its exported API. catchup is not among the imports refused: it is the
// subscription state machine the client runs too, and pulls in nothing of
// the store or the relay; the exported API must still not name it.
var machineryPrefixes = []string{
	"api/service", "backend", "bench", "internal", "lease", "migrations",
	"natsembed", "publisher", "status/statushttp",
}

// clientRuns are the machinery packages a public package may import
// because the client runs them: the subscription and its retry wait, and
// the JSON check that event.Prepare and the client's request run on data
// and metadata (it imports nothing of orisun), and the encoder of an
// append request's events that the client and package outbox share, so
// both send the same bytes (it imports event and rawjson only), and the
// list of retryable SQLSTATEs that package outbox and the store share, so
// both report the same errors as unavailable (it imports nothing).
var clientRuns = []string{"internal/serviceutil", "internal/rawjson", "internal/eventjson", "internal/pgretry"}

// machineryNamed: what no public package's exported API may name.
var machineryNamed = append([]string{"catchup"}, machineryPrefixes...)

// hookWords are the words that mark a test hook in an exported name. Each
// is matched as written (a capital at the start of a word), so Defaults
// does not match Fault.
var hookWords = []string{
	"Hook", "Broken", "StoreWrapper", "WrapStore", "Fault", "Inject",
	"ForTest", "TestOnly", "AfterAck", "BeforeAck",
}

func isMachinery(rel string, prefixes []string) bool {
	for _, p := range prefixes {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// goList runs go list in the module root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// libraryPackages lists the module's non-main packages by their path
// relative to the module, once per test binary.
var libraryPackages = sync.OnceValues(func() ([]string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Name}} {{.ImportPath}}", "./...").Output()
	if err != nil {
		return nil, err
	}
	var rels []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, ip, _ := strings.Cut(l, " ")
		if name == "main" {
			continue
		}
		rels = append(rels, strings.TrimPrefix(strings.TrimPrefix(ip, module), "/"))
	}
	return rels, nil
})

// TestSurfacePublicDepsHoldNoMachinery: an application that imports a
// public package (the client, say) does not compile the publisher, the
// lease, the store seam, the embedded server or any other machinery.
func TestSurfacePublicDepsHoldNoMachinery(t *testing.T) {
	t.Parallel()
	for _, rel := range publicPackages {
		if rel == "" {
			continue // the root package runs the node: machinery is its job
		}
		t.Run(rel, func(t *testing.T) {
			t.Parallel()
			for _, dep := range goList(t, "-deps", "./"+rel) {
				if !strings.HasPrefix(dep, module+"/") {
					continue
				}
				if d := strings.TrimPrefix(dep, module+"/"); isMachinery(d, machineryPrefixes) && !slices.Contains(clientRuns, d) {
					t.Errorf("go list -deps ./%s holds the machinery package %s", rel, dep)
				}
			}
		})
	}
}

// parsed is one package parsed for go/doc, without its tests.
type parsed struct {
	fset  *token.FileSet
	files []*ast.File
	pkg   *doc.Package
}

func parsePackage(t *testing.T, rel string) parsed {
	t.Helper()
	bp, err := build.Default.ImportDir(filepath.Join(".", filepath.FromSlash(rel)), build.ImportComment)
	if err != nil {
		t.Fatalf("package %q: %v", rel, err)
	}
	p := parsed{fset: token.NewFileSet()}
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(p.fset, filepath.Join(bp.Dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		p.files = append(p.files, f)
	}
	p.pkg, err = doc.NewFromFiles(p.fset, p.files, path.Join(module, rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exportedNames returns every exported name of the package's API as go doc
// shows it: constants, variables, functions, types, their methods, and the
// exported fields and methods of exported structs and interfaces.
func exportedNames(p parsed) []string {
	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(p.pkg.Consts)
	values(p.pkg.Vars)
	for _, f := range p.pkg.Funcs {
		names = append(names, f.Name)
	}
	for _, typ := range p.pkg.Types {
		names = append(names, typ.Name)
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			names = append(names, f.Name)
		}
		for _, m := range typ.Methods {
			names = append(names, typ.Name+"."+m.Name)
		}
		for _, spec := range typ.Decl.Specs {
			ts := spec.(*ast.TypeSpec)
			var fields *ast.FieldList
			switch st := ts.Type.(type) {
			case *ast.StructType:
				fields = st.Fields
			case *ast.InterfaceType:
				fields = st.Methods
			}
			if fields == nil {
				continue
			}
			for _, fl := range fields.List {
				for _, n := range fl.Names {
					if n.IsExported() {
						names = append(names, typ.Name+"."+n.Name)
					}
				}
			}
		}
	}
	return names
}

// TestSurfaceNoTestHooks: go doc of a public package shows no test hook.
// Test seams live in internal/testhooks, out of the public API.
func TestSurfaceNoTestHooks(t *testing.T) {
	t.Parallel()
	for _, rel := range publicPackages {
		p := parsePackage(t, rel)
		names := exportedNames(p)
		if len(names) == 0 {
			t.Errorf("package %q: no exported names found; the parse is wrong", rel)
		}
		for _, name := range names {
			for _, w := range hookWords {
				if strings.Contains(name, w) {
					t.Errorf("package %q exports %s, which looks like a test hook (%q): move it to internal/testhooks", rel, name, w)
				}
			}
		}
	}
}

// TestSurfaceExportsNoMachineryType: the exported API of a public package
// names no type, function or value of a machinery package, not even
// through an alias: what a public package hands out is defined in a
// public package.
func TestSurfaceExportsNoMachineryType(t *testing.T) {
	t.Parallel()
	for _, rel := range publicPackages {
		p := parsePackage(t, rel)
		for _, f := range p.files {
			// The file's import names of machinery packages.
			machinery := map[string]string{}
			for _, imp := range f.Imports {
				ip := strings.Trim(imp.Path.Value, `"`)
				if !strings.HasPrefix(ip, module+"/") || !isMachinery(strings.TrimPrefix(ip, module+"/"), machineryNamed) {
					continue
				}
				name := path.Base(ip)
				if imp.Name != nil {
					name = imp.Name.Name
				}
				machinery[name] = ip
			}
			if len(machinery) == 0 {
				continue
			}
			check := func(what string, n ast.Node) {
				if n == nil {
					return
				}
				ast.Inspect(n, func(n ast.Node) bool {
					if se, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := se.X.(*ast.Ident); ok {
							if ip, ok := machinery[id.Name]; ok {
								t.Errorf("package %q: the exported %s names %s.%s of the machinery package %s; define it in a public package",
									rel, what, id.Name, se.Sel.Name, ip)
							}
						}
					}
					return true
				})
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					check(d.Name.Name, d.Type)
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								if s.TypeParams != nil {
									check(s.Name.Name, s.TypeParams)
								}
								check(s.Name.Name, exportedPart(s.Type))
							}
						case *ast.ValueSpec:
							for i, n := range s.Names {
								if !n.IsExported() {
									continue
								}
								check(n.Name, s.Type)
								if i < len(s.Values) {
									check(n.Name, s.Values[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	x := recv.List[0].Type
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return false
		}
	}
}

// exportedPart returns a type with its unexported struct fields and
// interface methods left out: those are not part of the API.
func exportedPart(x ast.Expr) ast.Expr {
	keep := func(fl *ast.FieldList) *ast.FieldList {
		out := &ast.FieldList{}
		for _, f := range fl.List {
			if len(f.Names) == 0 || slices.ContainsFunc(f.Names, (*ast.Ident).IsExported) {
				out.List = append(out.List, f)
			}
		}
		return out
	}
	switch t := x.(type) {
	case *ast.StructType:
		return &ast.StructType{Fields: keep(t.Fields)}
	case *ast.InterfaceType:
		return &ast.InterfaceType{Methods: keep(t.Methods)}
	}
	return x
}

// TestSurfaceEveryPackageSaysWhichSide: every library package of the
// module is public or machinery, and its doc says which in its first
// paragraph: a public one promises stability, a machinery one says it is
// not for applications. A new package has to take a side.
func TestSurfaceEveryPackageSaysWhichSide(t *testing.T) {
	t.Parallel()
	rels, err := libraryPackages()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range rels {
		p := parsePackage(t, rel)
		first, _, _ := strings.Cut(p.pkg.Doc, "\n\n")
		first = strings.Join(strings.Fields(first), " ")
		if slices.Contains(publicPackages, rel) {
			if !strings.Contains(first, "stable") {
				t.Errorf("public package %q: the first paragraph of its doc does not say it is stable:\n%s", rel, first)
			}
			continue
		}
		if !strings.Contains(first, "machinery") || !strings.Contains(first, "without notice") {
			t.Errorf("package %q: the first paragraph of its doc does not say that it is orisun's machinery, "+
				"whose API may change without notice (or add it to publicPackages):\n%s", rel, first)
		}
	}
}

// TestSurfaceTestHooksStayInTests: internal/testhooks sets a Node's fault
// points; only tests, the packages that install its seams (the root
// package, natsembed) and the faultinject build of the command may import
// it, never production code.
func TestSurfaceTestHooksStayInTests(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{"hooks.go": true, "natsembed/hooks.go": true, "cmd/orisun/faultinject.go": true}
	lines := goList(t, "-f", `{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .IgnoredGoFiles}}{{$d}}/{{.}} {{end}}`, "./...")
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, l := range lines {
		for _, file := range strings.Fields(l) {
			rel, err := filepath.Rel(root, file)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range f.Imports {
				if strings.Trim(imp.Path.Value, `"`) == module+"/internal/testhooks" && !allowed[filepath.ToSlash(rel)] {
					t.Errorf("%s imports internal/testhooks: only tests and the faultinject build may set a Node's fault points", rel)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d non-test files checked; the listing is wrong", checked)
	}
}
