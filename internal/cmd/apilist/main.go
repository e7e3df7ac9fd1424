// Command apilist writes the public API of this repository's packages, one
// declaration a line (a type's exported fields and methods with it), so
// that every change of the surface shows as a diff in review. CI runs it
// with -check against the committed listing.
//
//	go run ./internal/cmd/apilist > api/public.txt   # after a deliberate change
//	go run ./internal/cmd/apilist -check api/public.txt
//
// It reads every package of the root module and of the nested modules
// below it, except main packages, internal/ and testdata/, and test files.
// Each package's listing starts with the number of exported identifiers:
// package-level names plus exported methods (fields are listed with their
// type, not counted).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	check := flag.String("check", "", "compare with this listing instead of printing; exit 1 if they differ")
	flag.Parse()
	got, err := listing(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(2)
	}
	if *check == "" {
		os.Stdout.Write(got)
		return
	}
	want, err := os.ReadFile(*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(2)
	}
	if !bytes.Equal(got, want) {
		fmt.Fprintf(os.Stderr, "apilist: the public API differs from %s:\n%s\n"+
			"If the change is deliberate: go run ./internal/cmd/apilist > %s\n", *check, diff(want, got), *check)
		os.Exit(1)
	}
}

// listing returns the API of every package under root.
func listing(root string) ([]byte, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != root && (strings.HasPrefix(name, ".") || name == "internal" || name == "testdata"):
				return filepath.SkipDir
			}
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, dir := range dirs {
		if err := listPackage(&out, dir); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), nil
}

// listPackage appends dir's package API to out, if it is a library.
func listPackage(out *bytes.Buffer, dir string) error {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	pkgs := map[string][]*ast.File{} // by package name (one per directory, but for main)
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	for name, files := range pkgs {
		if name == "main" {
			continue
		}
		var decls []string
		count := 0
		for _, f := range files {
			for _, d := range f.Decls {
				s, n := declString(fset, d)
				decls = append(decls, s...)
				count += n
			}
		}
		slices.Sort(decls)
		fmt.Fprintf(out, "package %s (%s): %d exported\n", name, filepath.ToSlash(dir), count)
		for _, d := range decls {
			fmt.Fprintf(out, "\t%s\n", d)
		}
	}
	return nil
}

// declString returns d's exported part as one-line strings (one per
// spec), and how many exported identifiers it declares.
func declString(fset *token.FileSet, d ast.Decl) ([]string, int) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Recv != nil && !exportedType(d.Recv.List[0].Type) {
			return nil, 0
		}
		d.Doc, d.Body = nil, nil
		return []string{oneLine(fset, d)}, 1
	case *ast.GenDecl:
		var out []string
		n := 0
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				s.Doc, s.Comment = nil, nil
				exportedMembers(s.Type)
				n++
			case *ast.ValueSpec:
				s.Names = slices.DeleteFunc(s.Names, func(id *ast.Ident) bool { return !id.IsExported() })
				if len(s.Names) == 0 {
					continue
				}
				s.Doc, s.Comment, s.Values = nil, nil, nil // the names and type, not how they are computed
				n += len(s.Names)
			default:
				continue
			}
			out = append(out, oneLine(fset, &ast.GenDecl{Tok: d.Tok, Specs: []ast.Spec{s}}))
		}
		return out, n
	}
	return nil, 0
}

// exportedMembers keeps a struct's exported fields (embedded ones whose
// type is exported, generic ones included) and an interface's exported
// methods and embedded types; it says "..." where it dropped some.
func exportedMembers(t ast.Expr) {
	var fl *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fl = t.Fields
	case *ast.InterfaceType:
		fl = t.Methods
	default:
		return
	}
	kept := fl.List[:0]
	dropped := false
	for _, f := range fl.List {
		f.Doc, f.Comment, f.Tag = nil, nil, nil
		if len(f.Names) == 0 { // embedded
			if exportedType(f.Type) {
				kept = append(kept, f)
			} else {
				dropped = true
			}
			continue
		}
		names := slices.DeleteFunc(slices.Clone(f.Names), func(id *ast.Ident) bool { return !id.IsExported() })
		if len(names) < len(f.Names) {
			dropped = true
		}
		if len(names) > 0 {
			f.Names = names
			kept = append(kept, f)
		}
	}
	if dropped {
		kept = append(kept, &ast.Field{Type: ast.NewIdent("...")})
	}
	fl.List = kept
}

// exportedType reports whether a receiver or embedded type names an
// exported type (through pointers and type arguments).
func exportedType(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		case *ast.SelectorExpr: // another package's type
			return x.Sel.IsExported()
		default:
			return false
		}
	}
}

// oneLine prints a node without comments, its white space folded.
func oneLine(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// diff returns the lines only in want (-) and only in got (+).
func diff(want, got []byte) string {
	w := strings.Split(string(want), "\n")
	g := strings.Split(string(got), "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
