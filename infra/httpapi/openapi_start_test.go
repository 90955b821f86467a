package httpapi

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/app/worker"
)

// setStartOperations writes into doc's paths the operation of every derived entry point
// (worker.Spec.Start), all of it from the registration: the path under
// /v1/workspaces/{workspace_id} and its parameters (a path item added when absent), the
// summary and description, the Idempotency-Key, and the 202 with the task, whose schema is
// named after the flow (store_disconnection: StoreDisconnection), and its operation.
// renderOpenAPI then sets its operationId and its errors from Endpoints, as for every route.
func setStartOperations(doc *yaml.Node, specs []worker.Spec) error {
	paths, params, schemas, err := docParts(doc)
	if err != nil {
		return err
	}
	for _, f := range specs {
		st := f.Start
		if st == nil {
			continue
		}
		if st.Summary == "" {
			return fmt.Errorf("flow %s: entry point %s without a Summary (worker.Start)", f.Name, st.Type)
		}
		schema := camel(f.Name)
		if mapValue(schemas, schema) == nil {
			return fmt.Errorf("flow %s: entry point %s: openapi.yaml has no components.schemas.%s (the task)", f.Name, st.Type, schema)
		}
		item := pathItem(paths, params, "/v1/workspaces/{workspace_id}"+st.Path)
		var ids []string
		for _, name := range pathParams(st.Path) {
			ids = append(ids, fmt.Sprintf("%q", name))
		}
		description := strings.TrimSpace(st.Description + " No body, or `{}`. Also the command type `" + st.Type +
			"` with data `{" + strings.Join(ids, ", ") + "}`.")
		op := &yaml.Node{Kind: yaml.MappingNode}
		op.Content = append(op.Content,
			scalar("operationId"), scalar(st.OperationID),
			scalar("summary"), scalar(st.Summary),
			scalar("description"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: description, Style: yaml.FoldedStyle},
			scalar("parameters"), &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{
				flowMap("$ref", quoted("#/components/parameters/IdempotencyKeyRequired"))}},
			scalar("responses"), &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
				quoted("202"), accepted(f.Resource.Key, schema, strings.ReplaceAll(f.Name, "_", " "))}})
		setMapValue(item, strings.ToLower(st.Method), op, len(item.Content)/2)
	}
	return nil
}

// docParts are doc's paths, components.parameters and components.schemas.
func docParts(doc *yaml.Node) (paths, params, schemas *yaml.Node, err error) {
	paths = mapValue(doc, "paths")
	components := mapValue(doc, "components")
	params, schemas = mapValue(components, "parameters"), mapValue(components, "schemas")
	if paths == nil || params == nil || schemas == nil {
		return nil, nil, nil, fmt.Errorf("openapi.yaml: no paths, components.parameters or components.schemas")
	}
	return paths, params, schemas, nil
}

// accepted is the 202 of a derived entry point: the task under key, and its operation.
func accepted(key, schema, what string) *yaml.Node {
	required := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{scalar(key), scalar("operation")}}
	body := flowMap("type", scalar("object"), "required", required, "properties", flowMap(
		key, flowMap("$ref", quoted("#/components/schemas/"+schema)),
		"operation", flowMap("$ref", quoted("#/components/schemas/Operation"))))
	headers := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		scalar("Idempotent-Replayed"), flowMap("$ref", quoted("#/components/headers/IdempotentReplayed")),
		scalar("Idempotency-Retention"), flowMap("$ref", quoted("#/components/headers/IdempotencyRetention"))}}
	return &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		scalar("description"), scalar("accepted; " + what + " started"),
		scalar("headers"), headers,
		scalar("content"), flowMap("application/json", flowMap("schema", body))}}
}

// pathParameter is the parameter of path segment {name}: the component declaring it when
// there is one (WorkspaceID), else a uuid in the path.
func pathParameter(params *yaml.Node, name string) *yaml.Node {
	for i := 0; i+1 < len(params.Content); i += 2 {
		p := params.Content[i+1]
		if v := mapValue(p, "name"); v != nil && v.Value == name {
			if in := mapValue(p, "in"); in != nil && in.Value == "path" {
				return flowMap("$ref", quoted("#/components/parameters/"+params.Content[i].Value))
			}
		}
	}
	return flowMap("name", scalar(name), "in", scalar("path"), "required", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
		"schema", flowMap("type", scalar("string"), "format", scalar("uuid")))
}

// camel is snake_case name in CamelCase (store_disconnection: StoreDisconnection).
func camel(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// A derived entry point's operation and the task resource's GETs come from the registration
// alone: a path absent from the document is added with its parameters (a component when one
// declares the id, else a uuid), the entry point carries the registration's summary,
// description, command type and the 202 with the task's schema, the GETs the list and the
// task; an entry point without a summary, or whose task has no schema, is refused.
func TestStartOperationsFromTheRegistration(t *testing.T) {
	doc := func() *yaml.Node {
		var root yaml.Node
		require.NoError(t, yaml.Unmarshal([]byte(`
components:
  parameters:
    WorkspaceID: {name: workspace_id, in: path, required: true, schema: {type: string, format: uuid}}
  schemas:
    ThingRemoval: {type: object}
paths:
  /healthz: {get: {}}
`), &root))
		return root.Content[0]
	}
	spec := worker.Spec{Name: "thing_removal", Resource: &worker.Resource{Key: "thing_removal"},
		Start: &worker.Start{Type: "listing.remove_thing", Method: "DELETE", Path: "/things/{thing_id}", OperationID: "removeThing",
			Summary: "Remove the thing.", Description: "Removes it upstream."}}
	d := doc()
	require.NoError(t, setStartOperations(d, []worker.Spec{spec}))
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	require.NoError(t, enc.Encode(d))
	require.Contains(t, out.String(), `  /v1/workspaces/{workspace_id}/things/{thing_id}:
    parameters: [{$ref: '#/components/parameters/WorkspaceID'}, {name: thing_id, in: path, required: true, schema: {type: string, format: uuid}}]
    delete:
      operationId: removeThing
      summary: Remove the thing.
      description: >-
        Removes it upstream. No body, or `+"`{}`"+`. Also the command type `+"`listing.remove_thing`"+` with data `+"`"+`{"thing_id"}`+"`"+`.
      parameters: [{$ref: '#/components/parameters/IdempotencyKeyRequired'}]
      responses:
        '202':
          description: accepted; thing removal started`)
	require.Contains(t, out.String(), `thing_removal: {$ref: '#/components/schemas/ThingRemoval'}, operation: {$ref: '#/components/schemas/Operation'}`)

	spec.Resource = &worker.Resource{Parent: "/things/{thing_id}", Path: "removals", IDParam: "removal_id", Key: "thing_removal",
		GetOperation: "getThingRemoval", ListOperation: "listThingRemovals"}
	require.NoError(t, setResourceOperations(d, []worker.Spec{spec}))
	out.Reset()
	enc = yaml.NewEncoder(&out)
	enc.SetIndent(2)
	require.NoError(t, enc.Encode(d))
	require.Contains(t, out.String(), `  /v1/workspaces/{workspace_id}/things/{thing_id}/removals:
    parameters: [{$ref: '#/components/parameters/WorkspaceID'}, {name: thing_id, in: path, required: true, schema: {type: string, format: uuid}}]
    get:
      operationId: listThingRemovals
      summary: List the thing's removals, newest first.
      parameters: [{$ref: '#/components/parameters/Limit'}, {$ref: '#/components/parameters/Cursor'}]
      responses:
        '200': {description: ok, content: {application/json: {schema: {type: object, required: [items, next_cursor], properties: {items: {type: array, items: {$ref: '#/components/schemas/ThingRemoval'}}, next_cursor: {$ref: '#/components/schemas/NextCursor'}}}}}}
  /v1/workspaces/{workspace_id}/things/{thing_id}/removals/{removal_id}:`)
	require.Contains(t, out.String(), `      operationId: getThingRemoval
      summary: One removal of the thing.
      responses:
        '200': {description: ok, content: {application/json: {schema: {type: object, required: [thing_removal], properties: {thing_removal: {$ref: '#/components/schemas/ThingRemoval'}}}}}}`)

	noSummary := spec
	noSummary.Start = &worker.Start{Type: "listing.remove_thing", Method: "DELETE", Path: "/things/{thing_id}", OperationID: "removeThing"}
	require.ErrorContains(t, setStartOperations(doc(), []worker.Spec{noSummary}), "flow thing_removal: entry point listing.remove_thing without a Summary")
	noSchema := spec
	noSchema.Name = "thing_other"
	require.ErrorContains(t, setStartOperations(doc(), []worker.Spec{noSchema}), "no components.schemas.ThingOther")
}

// setResourceOperations writes into doc's paths the two GET operations of every flow's task
// resource (worker.Spec.Resource) from the registration: the list under the parent, newest
// first, and one task, their paths and parameters (a path item added when absent), their
// summaries and their 200s (the components <Schema>List and <Schema>Envelope when the
// document has them, else the task's schema inline). renderOpenAPI then sets their errors.
func setResourceOperations(doc *yaml.Node, specs []worker.Spec) error {
	paths, params, schemas, err := docParts(doc)
	if err != nil {
		return err
	}
	for _, f := range specs {
		r := f.Resource
		if r == nil {
			continue
		}
		schema := camel(f.Name)
		if mapValue(schemas, schema) == nil {
			return fmt.Errorf("flow %s: task resource: openapi.yaml has no components.schemas.%s (the task)", f.Name, schema)
		}
		ref := func(name string) *yaml.Node { return flowMap("$ref", quoted("#/components/schemas/"+name)) }
		list := flowMap("type", scalar("object"), "required", flowSeq(scalar("items"), scalar("next_cursor")), "properties",
			flowMap("items", flowMap("type", scalar("array"), "items", ref(schema)), "next_cursor", ref("NextCursor")))
		if mapValue(schemas, schema+"List") != nil {
			list = ref(schema + "List")
		}
		one := flowMap("type", scalar("object"), "required", flowSeq(scalar(r.Key)), "properties", flowMap(r.Key, ref(schema)))
		if mapValue(schemas, schema+"Envelope") != nil {
			one = ref(schema + "Envelope")
		}
		parent := strings.TrimSuffix(r.ParentParam(), "_id")
		base := "/v1/workspaces/{workspace_id}" + r.Parent + "/" + r.Path
		for _, op := range []struct {
			path, id, summary string
			params            []*yaml.Node
			body              *yaml.Node
		}{
			{base, r.ListOperation, "List the " + parent + "'s " + r.Path + ", newest first.",
				[]*yaml.Node{flowMap("$ref", quoted("#/components/parameters/Limit")), flowMap("$ref", quoted("#/components/parameters/Cursor"))}, list},
			{base + "/{" + r.IDParam + "}", r.GetOperation, "One " + strings.TrimSuffix(r.IDParam, "_id") + " of the " + parent + ".", nil, one},
		} {
			item := pathItem(paths, params, op.path)
			get := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("operationId"), scalar(op.id), scalar("summary"), scalar(op.summary)}}
			if op.params != nil {
				get.Content = append(get.Content, scalar("parameters"), flowSeq(op.params...))
			}
			get.Content = append(get.Content, scalar("responses"), &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
				quoted("200"), flowMap("description", scalar("ok"), "content", flowMap("application/json", flowMap("schema", op.body)))}})
			setMapValue(item, "get", get, len(item.Content)/2)
		}
	}
	return nil
}

// pathItem is doc's path item of path, added when absent with the path's parameters, right
// after the path that is its longest prefix (its parent), or last.
func pathItem(paths, params *yaml.Node, path string) *yaml.Node {
	if item := mapValue(paths, path); item != nil {
		return item
	}
	list := flowSeq()
	for _, name := range pathParams(path) {
		list.Content = append(list.Content, pathParameter(params, name))
	}
	item := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("parameters"), list}}
	at, longest := len(paths.Content), 0
	for i := 0; i+1 < len(paths.Content); i += 2 {
		if p := paths.Content[i].Value; strings.HasPrefix(path, p+"/") && len(p) > longest {
			at, longest = i+2, len(p)
		}
	}
	paths.Content = slices.Insert(paths.Content, at, scalar(path), item)
	return item
}

func flowSeq(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: items}
}
