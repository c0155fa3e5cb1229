// Command json_fields prints, for every protobuf message of the Kubernetes API types, how the
// API server writes each of its fields as JSON: the JSON name (empty for an embedded struct whose
// fields are written inline), `omitempty` or `omitzero`, and whether the Go field is a pointer,
// a slice, a map or a struct value. The protobuf descriptors (kubernetes.fds.gz) do not carry
// these; wasmformer-protobuf needs them to write a protobuf body as the JSON the server writes.
// Run by generate.sh inside the harness's Go module (tests/kube-apiserver).
//
// Output: {"messages": {message full name → [[field number, JSON name, flags], …] in the Go
// struct's field order}, "customJSON": [full names of the types that write their own JSON]};
// flags: i inline, o omitempty, z omitzero, p pointer, s slice, m map, v struct value.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/client-go/kubernetes/scheme"
)

type field = [3]any

var marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

// fullName is the protobuf message name of a Go type: its package path, dotted, and its name.
func fullName(t reflect.Type) string {
	return strings.NewReplacer("/", ".", "-", "_").Replace(t.PkgPath()) + "." + t.Name()
}

func main() {
	messages := map[string][]field{}
	custom := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		note := func(t reflect.Type) {
			if t.Name() != "" && strings.HasPrefix(t.PkgPath(), "k8s.io/") &&
				(t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler)) {
				custom[fullName(t)] = true
			}
		}
		note(t)
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			if t.Kind() == reflect.Map {
				visit(t.Key())
			}
			t = t.Elem()
			note(t)
		}
		if t.Kind() != reflect.Struct || seen[t] || !strings.HasPrefix(t.PkgPath(), "k8s.io/") {
			return
		}
		seen[t] = true
		var fields []field
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			visit(f.Type)
			tag, ok := f.Tag.Lookup("protobuf")
			if !ok {
				continue
			}
			parts := strings.Split(tag, ",")
			if len(parts) < 2 {
				continue
			}
			number, err := strconv.Atoi(parts[1])
			if err != nil {
				continue
			}
			jsonTag := strings.Split(f.Tag.Get("json"), ",")
			name, flags := jsonTag[0], ""
			for _, option := range jsonTag[1:] {
				switch option {
				case "inline":
					flags += "i"
				case "omitempty":
					flags += "o"
				case "omitzero":
					flags += "z"
				}
			}
			if name == "" && f.Anonymous {
				flags += "i"
			}
			switch f.Type.Kind() {
			case reflect.Pointer:
				flags += "p"
			case reflect.Slice:
				if f.Type.Elem().Kind() != reflect.Uint8 {
					flags += "s"
				}
			case reflect.Map:
				flags += "m"
			case reflect.Struct:
				flags += "v"
			}
			fields = append(fields, field{number, name, flags})
		}
		if len(fields) > 0 {
			messages[fullName(t)] = fields
		}
	}
	for _, t := range scheme.Scheme.AllKnownTypes() {
		visit(t)
	}
	for _, object := range []any{
		apiextensionsv1.CustomResourceDefinition{}, apiextensionsv1.CustomResourceDefinitionList{},
		apiextensionsv1beta1.CustomResourceDefinition{}, apiextensionsv1beta1.CustomResourceDefinitionList{},
	} {
		visit(reflect.TypeOf(object))
	}
	names := []string{}
	for name := range custom {
		names = append(names, name)
	}
	sort.Strings(names)
	out, err := json.Marshal(map[string]any{"messages": messages, "customJSON": names})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}
