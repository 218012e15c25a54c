package api

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"
)

// fill sets every field v holds, however deep, to a value that is not its
// zero, so that every JSON name of the contract shows in its encoding.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 1, 3, 47, 6, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// The debug API's JSON is a contract: ferryctl and operators' scripts read
// it by name. A renamed, dropped or added field changes
// testdata/wire.json, which is rewritten only on purpose
// (FERRY_UPDATE_DOCS=1 go test ./api/).
func TestWireIsStable(t *testing.T) {
	messages := []any{&JobsResponse{}, &DomainsResponse{}, &ProxyResponse{}, &ErrorResponse{}, &MessageResponse{},
		&MigrateRequest{}, &MigrateResponse{}, &AbortResult{}, &DryRunRequest{}, &CheckResponse{},
		&KubeVirtMigration{}, &DrainBlock{}}
	var out bytes.Buffer
	for _, m := range messages {
		fill(reflect.ValueOf(m).Elem())
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(reflect.TypeOf(m).Elem().Name() + " ")
		out.Write(b)
		out.WriteString("\n")
	}
	const golden = "testdata/wire.json"
	if os.Getenv("FERRY_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("the debug API's JSON differs from %s: a client reading it by name breaks. If the change is meant, rewrite it with FERRY_UPDATE_DOCS=1 go test ./api/ and say so where clients will read it.\n%s", golden, out.String())
	}
}
