package serde

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/hamba/avro/v2"
)

// unmappedFields returns the exported fields of the Go type t (by their
// path from t) that the Avro schema s has no field for: hamba writes
// nothing of them and reads them as zero, so a value put in one is lost
// without an error. Fields are matched as hamba matches them: by the
// "avro" tag's name, else the Go name; embedded structs are flattened. A
// field tagged `avro:"-"` is left out on purpose. Nested records are
// checked through pointers, unions with one non-null branch, arrays and
// maps (each Go struct type where it is met first); other types are not
// structs or have nothing to check.
func unmappedFields(t reflect.Type, s avro.Schema) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, s avro.Schema, path string)
	walk = func(t reflect.Type, s avro.Schema, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch sc := s.(type) {
		case *avro.RefSchema:
			walk(t, sc.Schema(), path)
		case *avro.UnionSchema:
			var branch avro.Schema
			for _, b := range sc.Types() {
				if b.Type() == avro.Null {
					continue
				}
				if branch != nil {
					return // several branches: the Go type is an interface or a map
				}
				branch = b
			}
			if branch != nil {
				walk(t, branch, path)
			}
		case *avro.ArraySchema:
			if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
				walk(t.Elem(), sc.Items(), path+"[]")
			}
		case *avro.MapSchema:
			if t.Kind() == reflect.Map {
				walk(t.Elem(), sc.Values(), path+"[]")
			}
		case *avro.RecordSchema:
			if t.Kind() != reflect.Struct || seen[t] {
				return // a recursive type is checked once
			}
			seen[t] = true
			fields := map[string]avro.Schema{}
			for _, f := range sc.Fields() {
				fields[f.Name()] = f.Type()
			}
			var fieldsOf func(st reflect.Type)
			fieldsOf = func(st reflect.Type) {
				for i := range st.NumField() {
					f := st.Field(i)
					if f.Anonymous {
						et := f.Type
						if et.Kind() == reflect.Pointer {
							et = et.Elem()
						}
						if et.Kind() == reflect.Struct {
							fieldsOf(et)
						}
						continue
					}
					if !f.IsExported() {
						continue
					}
					name := f.Name
					if tag, ok := f.Tag.Lookup("avro"); ok {
						name, _, _ = strings.Cut(tag, ",")
					}
					if name == "-" {
						continue
					}
					fs, ok := fields[name]
					if !ok {
						out = append(out, fmt.Sprintf("%s.%s (Avro name %q)", path, f.Name, name))
						continue
					}
					walk(f.Type, fs, path+"."+f.Name)
				}
			}
			fieldsOf(t)
		}
	}
	walk(t, s, t.String())
	return out
}
