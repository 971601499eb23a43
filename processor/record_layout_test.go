package processor

import (
	"reflect"
	"testing"

	"github.com/weirstream/weir/internal/graph"
)

// fromRuntime and toRuntime reinterpret a slice of one header type as the
// other; that is sound only while both are structs of the same fields, in
// the same order, of the same types. A field added to one alone fails here.
func TestHeaderLayoutsAgree(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[Header](), reflect.TypeFor[graph.Header]()},
		{reflect.TypeFor[Metadata](), reflect.TypeFor[graph.Metadata]()},
	} {
		a, b := pair[0], pair[1]
		if a.Size() != b.Size() || a.NumField() != b.NumField() {
			t.Fatalf("%v and %v differ in size or fields", a, b)
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Type != fb.Type || fa.Offset != fb.Offset {
				t.Errorf("%v.%s (%v at %d) and %v.%s (%v at %d) differ", a, fa.Name, fa.Type, fa.Offset, b, fb.Name, fb.Type, fb.Offset)
			}
		}
	}
	hs := []graph.Header{{Key: "a", Value: []byte("1")}, {Key: "b"}}
	got := fromRuntime(hs)
	if len(got) != 2 || got[0].Key != "a" || string(got[0].Value) != "1" || got[1].Key != "b" {
		t.Fatalf("fromRuntime = %+v", got)
	}
	if back := toRuntime(got); &back[0] != &hs[0] || len(back) != 2 {
		t.Fatal("toRuntime does not give back the runtime's slice")
	}
	if fromRuntime(nil) != nil || toRuntime(nil) != nil {
		t.Fatal("an empty slice converts to nil")
	}
}
