package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// FieldManager is the server-side apply field manager used by Apply.
const FieldManager = "ferry-kubeapi"

// document is one object from a multi-document YAML stream.
type document struct {
	obj   *unstructured.Unstructured
	index int // 1-based position in the stream
}

func (d document) String() string {
	name := d.obj.GetName()
	if name == "" {
		name = d.obj.GetGenerateName() + "*"
	}
	if ns := d.obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%s %s (document %d)", d.obj.GetKind(), name, d.index)
}

// Apply server-side applies every object in the multi-document YAML (or JSON) yamlDocs,
// in order, with Force so that this package owns the fields it sets. Objects with only
// generateName are created instead. Namespaced objects without a namespace go to
// "default". dryRun sends DryRun=All: nothing is stored, so objects in a namespace that
// the same documents would create fail as the namespace does not exist yet; apply the
// Namespace for real first. Apply keeps going after a failure and returns every
// error, each naming its object.
func (s *Server) Apply(ctx context.Context, yamlDocs []byte, dryRun bool) error {
	docs, err := decodeDocuments(yamlDocs)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range docs {
		if err := s.applyOne(ctx, d, dryRun); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) applyOne(ctx context.Context, d document, dryRun bool) error {
	gvk := d.obj.GroupVersionKind()
	mapping, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// The kind may come from a CRD installed after discovery was cached.
		s.mapper.Reset()
		mapping, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return err
	}
	client := s.Dynamic.Resource(mapping.Resource)
	var ri dynamic.ResourceInterface = client
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if d.obj.GetNamespace() == "" {
			d.obj.SetNamespace(metav1.NamespaceDefault)
		}
		ri = client.Namespace(d.obj.GetNamespace())
	}
	var dry []string
	if dryRun {
		dry = []string{metav1.DryRunAll}
	}
	if d.obj.GetName() == "" {
		_, err = ri.Create(ctx, d.obj, metav1.CreateOptions{FieldManager: FieldManager, DryRun: dry})
		return err
	}
	_, err = ri.Apply(ctx, d.obj.GetName(), d.obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: dry})
	return err
}

// decodeDocuments splits a YAML or JSON stream into objects, skipping empty documents
// and expanding List kinds, and checks that each has an apiVersion and kind.
func decodeDocuments(data []byte) ([]document, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var docs []document
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
			return nil, fmt.Errorf("document %d (%s %q): apiVersion and kind are required", i, obj.GetKind(), obj.GetName())
		}
		if !obj.IsList() {
			docs = append(docs, document{obj: obj, index: i})
			continue
		}
		err := obj.EachListItem(func(item runtime.Object) error {
			docs = append(docs, document{obj: item.(*unstructured.Unstructured), index: i})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, obj.GetKind(), err)
		}
	}
}
