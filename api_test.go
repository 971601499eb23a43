package weir

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// publicPackages are the packages a user imports. weirtest/kafka is a
// module of its own; go.work puts it in reach of this one.
var publicPackages = []string{
	"github.com/weirstream/weir",
	"github.com/weirstream/weir/changelog",
	"github.com/weirstream/weir/kstream",
	"github.com/weirstream/weir/ktable",
	"github.com/weirstream/weir/processor",
	"github.com/weirstream/weir/schema",
	"github.com/weirstream/weir/serde",
	"github.com/weirstream/weir/txn",
	"github.com/weirstream/weir/weirtest",
	"github.com/weirstream/weir/weirtest/kafka",
}

// A signature of the public API never reaches into internal/: a user can
// neither name such a type nor rely on it staying, and a field or method
// of it would be API by accident. The test loads the compiled export data
// of every public package (go list -export) and walks every exported
// declaration: function and method signatures, struct fields, interface
// methods, variables, constants and the targets of aliases.
func TestPublicAPIReachesNoInternalPackage(t *testing.T) {
	pkgs := loadExported(t, publicPackages)
	var leaks []string
	for _, path := range publicPackages {
		leaks = append(leaks, internalLeaks(pkgs[path])...)
	}
	sort.Strings(leaks)
	for _, l := range leaks {
		t.Error(l)
	}
}

// The walk finds each way a signature can reach an internal type, checked
// on a package written for the purpose: a broken rule would let one of
// these through.
func TestInternalLeaksAreFound(t *testing.T) {
	internal := types.NewPackage("example.com/m/internal/x", "x")
	hidden := types.NewNamed(types.NewTypeName(token.NoPos, internal, "Hidden", nil), types.NewStruct(nil, nil), nil)
	pub := types.NewPackage("example.com/m/pub", "pub")
	scope := pub.Scope()
	hiddenPtr := types.NewPointer(hidden)
	param := func(typ types.Type) *types.Tuple {
		return types.NewTuple(types.NewVar(token.NoPos, pub, "v", typ))
	}
	// func F(*x.Hidden)
	scope.Insert(types.NewFunc(token.NoPos, pub, "F", types.NewSignatureType(nil, nil, nil, param(hiddenPtr), nil, false)))
	// func ok(x.Hidden): unexported, not API
	scope.Insert(types.NewFunc(token.NoPos, pub, "ok", types.NewSignatureType(nil, nil, nil, param(hidden), nil, false)))
	// type S struct { Field map[string][]x.Hidden; hidden x.Hidden }
	s := types.NewStruct([]*types.Var{
		types.NewField(token.NoPos, pub, "Field", types.NewMap(types.Typ[types.String], types.NewSlice(hidden)), false),
		types.NewField(token.NoPos, pub, "hidden", hidden, false),
	}, nil)
	sName := types.NewNamed(types.NewTypeName(token.NoPos, pub, "S", nil), s, nil)
	scope.Insert(sName.Obj())
	// func (S) M() chan x.Hidden
	recv := types.NewVar(token.NoPos, pub, "s", sName)
	sName.AddMethod(types.NewFunc(token.NoPos, pub, "M", types.NewSignatureType(recv, nil, nil, nil, param(types.NewChan(types.SendRecv, hidden)), false)))
	// type I interface { G() x.Hidden }
	iface := types.NewInterfaceType([]*types.Func{types.NewFunc(token.NoPos, pub, "G", types.NewSignatureType(nil, nil, nil, nil, param(hidden), false))}, nil)
	iface.Complete()
	scope.Insert(types.NewNamed(types.NewTypeName(token.NoPos, pub, "I", nil), iface, nil).Obj())
	// type A = x.Hidden
	scope.Insert(types.NewAlias(types.NewTypeName(token.NoPos, pub, "A", nil), hidden).Obj())
	// type O func(*x.Hidden)
	scope.Insert(types.NewNamed(types.NewTypeName(token.NoPos, pub, "O", nil), types.NewSignatureType(nil, nil, nil, param(hiddenPtr), nil, false), nil).Obj())
	// var V x.Hidden
	scope.Insert(types.NewVar(token.NoPos, pub, "V", hidden))

	got := strings.Join(internalLeaks(pub), "\n")
	for _, want := range []string{"pub.F", "pub.S.Field", "pub.S.M", "pub.I.G", "pub.A", "pub.O", "pub.V"} {
		if !strings.Contains(got, want+":") {
			t.Errorf("the leak of %s was not found; found:\n%s", want, got)
		}
	}
	if strings.Contains(got, "pub.ok") || strings.Contains(got, "S.hidden") {
		t.Errorf("unexported names reported:\n%s", got)
	}
}

// loadExported type-checks nothing itself: it asks the go command for the
// export data of paths and their dependencies and imports each path from
// it.
func loadExported(t *testing.T, paths []string) map[string]*types.Package {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, paths...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	pkgs := map[string]*types.Package{}
	for _, path := range paths {
		p, err := imp.Import(path)
		if err != nil {
			t.Fatalf("importing %s: %v", path, err)
		}
		pkgs[path] = p
	}
	return pkgs
}

// internalLeaks lists, for each exported declaration of pkg whose
// signature names a type of an internal package, the declaration and the
// type.
func internalLeaks(pkg *types.Package) []string {
	var leaks []string
	report := func(where string, typ types.Type) {
		if bad := internalIn(typ, map[types.Type]bool{}); bad != "" {
			leaks = append(leaks, fmt.Sprintf("%s.%s: reaches %s", pkg.Name(), where, bad))
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Func, *types.Var, *types.Const:
			report(name, o.Type())
		case *types.TypeName:
			if alias, ok := o.Type().(*types.Alias); ok {
				report(name, types.Unalias(alias))
				continue
			}
			named, ok := o.Type().(*types.Named)
			if !ok {
				continue
			}
			switch u := named.Underlying().(type) {
			case *types.Struct:
				for i := range u.NumFields() {
					if f := u.Field(i); f.Exported() {
						report(name+"."+f.Name(), f.Type())
					}
				}
			case *types.Interface:
				for i := range u.NumMethods() {
					if m := u.Method(i); m.Exported() {
						report(name+"."+m.Name(), m.Type())
					}
				}
			default:
				report(name, u)
			}
			// The method set of *T holds T's own methods and those its
			// embedded fields promote.
			ms := types.NewMethodSet(types.NewPointer(named))
			for i := range ms.Len() {
				if m := ms.At(i).Obj(); m.Exported() {
					report(name+"."+m.Name(), m.Type())
				}
			}
		}
	}
	return leaks
}

// internalIn returns the first type of an internal package that typ
// names, looking through composite types and signatures but not into the
// definitions of other named types (each public package is walked on its
// own), or "".
func internalIn(typ types.Type, seen map[types.Type]bool) string {
	if seen[typ] {
		return ""
	}
	seen[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		return internalIn(types.Unalias(t), seen)
	case *types.Named:
		if p := t.Obj().Pkg(); p != nil && isInternal(p.Path()) {
			return p.Path() + "." + t.Obj().Name()
		}
		if args := t.TypeArgs(); args != nil {
			for i := range args.Len() {
				if bad := internalIn(args.At(i), seen); bad != "" {
					return bad
				}
			}
		}
	case *types.Pointer:
		return internalIn(t.Elem(), seen)
	case *types.Slice:
		return internalIn(t.Elem(), seen)
	case *types.Array:
		return internalIn(t.Elem(), seen)
	case *types.Map:
		if bad := internalIn(t.Key(), seen); bad != "" {
			return bad
		}
		return internalIn(t.Elem(), seen)
	case *types.Chan:
		return internalIn(t.Elem(), seen)
	case *types.Signature:
		for _, tuple := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tuple.Len() {
				if bad := internalIn(tuple.At(i).Type(), seen); bad != "" {
					return bad
				}
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				if bad := internalIn(f.Type(), seen); bad != "" {
					return bad
				}
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			if bad := internalIn(t.Method(i).Type(), seen); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// isInternal reports whether an import path is inside an internal/ tree.
func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") || strings.HasPrefix(path, "internal/")
}
