package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const (
	sources = "../../docs/diagrams"
	docs    = "../../docs"
)

// TestCheckedInPicturesAreCurrent draws every source again and compares
// the result with the picture checked into docs/: a source changed
// without scripts/diagrams.sh, or a picture edited by hand, fails here.
func TestCheckedInPicturesAreCurrent(t *testing.T) {
	tmp := t.TempDir()
	written, err := generate(sources, tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range written {
		name := filepath.Base(w)
		fresh, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		old, err := os.ReadFile(filepath.Join(docs, name))
		if err != nil {
			t.Errorf("docs/%s is missing: run scripts/diagrams.sh and commit it", name)
			continue
		}
		if !bytes.Equal(fresh, old) {
			t.Errorf("docs/%s differs from what its source in docs/diagrams draws: run scripts/diagrams.sh and commit it", name)
		}
	}
}

// TestPicturesAreShown checks that docs/protocol.md shows every picture.
func TestPicturesAreShown(t *testing.T) {
	protocol, err := os.ReadFile(filepath.Join(docs, "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(sources)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name, _ := outputName(e.Name()); name != "" && !bytes.Contains(protocol, []byte("]("+name+")")) {
			t.Errorf("docs/protocol.md does not show %s", name)
		}
	}
}

// TestDrawingIsDeterministic draws each source twice.
func TestDrawingIsDeterministic(t *testing.T) {
	eachSource(t, func(file, src string) {
		a, err := render(file, src)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := render(file, src)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two drawings differ", file)
		}
	})
}

// eachSource calls f with the name and text of every source in
// docs/diagrams that draws a picture.
func eachSource(t *testing.T, f func(file, src string)) {
	t.Helper()
	entries, err := os.ReadDir(sources)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name, _ := outputName(e.Name()); name == "" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(sources, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f(e.Name(), string(src))
	}
}

// TestLayoutRefusesOverlaps: a label too wide for its room is an error
// naming its line, not a picture with overlapping text.
func TestLayoutRefusesOverlaps(t *testing.T) {
	src := `
state a "a"
state b "b"
state c "c"
edge a -> b: x
edge b -> c: y
edge c -> a: a label far wider than the stretch of the back edge it is written over, which is short
`
	_, err := render("t.states", src)
	if err == nil || !strings.Contains(err.Error(), "line 7") {
		t.Fatalf("got %v, want an error naming line 7", err)
	}
}

// TestSourceErrorsNameTheLine: a mistake in a source is reported with its
// line.
func TestSourceErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"a.seq", "participant A \"a\"\nparticipant B \"b\"\nA -> C: hello", "line 3: unknown participant"},
		{"a.seq", "participant A \"a\"\nparticipant B \"b\"\nloop x\nend", "line 4: empty loop"},
		{"a.seq", "participant A \"a\"\nparticipant B \"b\"\nactivate A", "activate without deactivate"},
		{"a.states", "state a \"a\"\nedge a -> z: no", "line 2: unknown state or group"},
		{"a.states", "state a \"a\"\nstate b \"b\"\nstate c \"c\"\nedge a -> b: x\nedge b -> c: y\nedge a -> c: z", "line 6: a forward edge must span one layer"},
	} {
		_, err := render(c.name, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

// rootPackage reads the election package's declarations (its files in the
// repository's root, tests left out): for each type, the names of its
// methods and fields; and the values of its string constants, by name.
func rootPackage(t *testing.T) (members map[string]map[string]bool, consts map[string]string) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../*.go")
	if err != nil {
		t.Fatal(err)
	}
	members, consts = map[string]map[string]bool{}, map[string]string{}
	add := func(typ, name string) {
		if members[typ] == nil {
			members[typ] = map[string]bool{}
		}
		members[typ][name] = true
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				typ := d.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					add(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						add(s.Name.Name, "")
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									add(s.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if i < len(s.Values) {
								if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
									consts[n.Name], _ = strconv.Unquote(lit.Value)
								}
							}
						}
					}
				}
			}
		}
	}
	return members, consts
}

// TestSourcesNameWhatTheCodeHas: every Type.member a source cites in
// backticks is declared in the election package, so that a rename in the
// code cannot leave a picture naming what no longer exists; and the
// record's states are exactly the code's (end.go's state constants).
func TestSourcesNameWhatTheCodeHas(t *testing.T) {
	members, consts := rootPackage(t)
	cited := regexp.MustCompile("`([A-Za-z]+)\\.([A-Za-z]+)`")
	eachSource(t, func(file, src string) {
		for _, m := range cited.FindAllStringSubmatch(src, -1) {
			typ, member := m[1], m[2]
			if len(typ) == 1 {
				continue // a table's alias in SQL: r.epoch
			}
			if !members[typ][member] {
				t.Errorf("docs/diagrams/%s cites %s.%s, which the election package does not declare: update the source and run scripts/diagrams.sh", file, typ, member)
			}
		}
	})
	var states []string
	for name, value := range consts {
		if strings.HasPrefix(name, "state") {
			states = append(states, value)
		}
	}
	sort.Strings(states)
	d, err := parseStates(mustRead(t, filepath.Join(sources, "record.states")))
	if err != nil {
		t.Fatal(err)
	}
	var drawn []string
	seen := map[string]bool{}
	for _, n := range d.nodes {
		if s := strings.Trim(n.lines[0], "`"); !n.start && !seen[s] && !strings.ContainsAny(s, " ,") {
			seen[s] = true
			drawn = append(drawn, s)
		}
	}
	sort.Strings(drawn)
	if strings.Join(drawn, " ") != strings.Join(states, " ") {
		t.Errorf("docs/diagrams/record.states draws the states %v; end.go declares %v", drawn, states)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
