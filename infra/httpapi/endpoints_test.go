package httpapi

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
)

var update = flag.Bool("update", false, "rewrite openapi.yaml and docs/http-api.md from Endpoints")

const (
	openAPIPath = "openapi.yaml"
	apiDocPath  = "../../docs/http-api.md"
	// The generated part of docs/http-api.md lies between these lines.
	apiDocBegin = "<!-- errors by endpoint: generated from infra/httpapi/endpoints.go by make api-doc; do not edit -->"
	apiDocEnd   = "<!-- end of errors by endpoint -->"
)

// TestEndpointsMatchRoutes: Endpoints lists each served route once, with a unique
// operationId.
func TestEndpointsMatchRoutes(t *testing.T) {
	s, err := New(Config{}, Deps{App: &app.Application{}, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	served := map[string]bool{}
	require.NoError(t, chi.Walk(s.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route != "/" {
			route = strings.TrimSuffix(route, "/")
		}
		served[method+" "+strings.ReplaceAll(route, "/*/", "/")] = true
		return nil
	}))
	declared, ids := map[string]bool{}, map[string]bool{}
	for _, e := range Endpoints() {
		k := e.Method + " " + e.Path
		require.False(t, declared[k], "%s declared twice", k)
		require.False(t, ids[e.OperationID], "operationId %s used twice", e.OperationID)
		require.Regexp(t, `^[a-z][A-Za-z0-9]+$`, e.OperationID)
		declared[k], ids[e.OperationID] = true, true
	}
	require.Equal(t, keys(served), keys(declared), "Endpoints and the router disagree")
}

// TestEndpointDocsAreCurrent fails when openapi.yaml or docs/http-api.md is not what
// Endpoints generates; `make api-doc` rewrites both.
func TestEndpointDocsAreCurrent(t *testing.T) {
	doc, err := os.ReadFile(openAPIPath)
	require.NoError(t, err)
	gotDoc, err := renderOpenAPI(doc, Endpoints())
	require.NoError(t, err)
	md, err := os.ReadFile(apiDocPath)
	require.NoError(t, err)
	gotMD, err := renderAPIDoc(md, Endpoints())
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(openAPIPath, gotDoc, 0o644))
		require.NoError(t, os.WriteFile(apiDocPath, gotMD, 0o644))
		return
	}
	require.Equal(t, string(gotDoc), string(doc), "infra/httpapi/openapi.yaml is stale: run make api-doc")
	require.Equal(t, string(gotMD), string(md), "docs/http-api.md is stale: run make api-doc")
}

// statusCodes groups an endpoint's errors by HTTP status, each status's codes sorted and
// listed once.
func statusCodes(e Endpoint) (statuses []int, codes map[int][]string) {
	codes = map[int][]string{}
	for _, de := range e.Errors {
		st := StatusOf(de.Kind)
		if !slices.Contains(codes[st], de.Code) {
			codes[st] = append(codes[st], de.Code)
		}
	}
	for st := range codes {
		sort.Strings(codes[st])
		statuses = append(statuses, st)
	}
	sort.Ints(statuses)
	return statuses, codes
}

// retryAfter reports whether an answer with this status and these codes carries Retry-After.
func retryAfter(status int, codes []string) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable ||
		slices.Contains(codes, "IDEMPOTENCY_REQUEST_IN_PROGRESS")
}

// renderOpenAPI sets the operationId and the error responses (status 400 and above) of every
// operation of doc with errors in endpoints; the success responses and everything else stay.
func renderOpenAPI(doc []byte, endpoints []Endpoint) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	paths := mapValue(root.Content[0], "paths")
	if paths == nil {
		return nil, fmt.Errorf("openapi.yaml: no paths")
	}
	if err := setStartOperations(root.Content[0], flows.All()); err != nil {
		return nil, err
	}
	if err := setResourceOperations(root.Content[0], flows.All()); err != nil {
		return nil, err
	}
	byRoute := map[string]Endpoint{}
	for _, e := range endpoints {
		byRoute[e.Method+" "+e.Path] = e
	}
	for i := 0; i < len(paths.Content); i += 2 {
		path, ops := paths.Content[i].Value, paths.Content[i+1]
		for j := 0; j < len(ops.Content); j += 2 {
			method, op := ops.Content[j].Value, ops.Content[j+1]
			if method == "parameters" {
				continue
			}
			e, ok := byRoute[strings.ToUpper(method)+" "+path]
			if !ok {
				return nil, fmt.Errorf("openapi.yaml: %s %s is not in Endpoints", strings.ToUpper(method), path)
			}
			setMapValue(op, "operationId", scalar(e.OperationID), 0)
			if e.Errors == nil {
				continue
			}
			responses := mapValue(op, "responses")
			if responses == nil {
				return nil, fmt.Errorf("openapi.yaml: %s %s has no responses", method, path)
			}
			kept := responses.Content[:0]
			for k := 0; k < len(responses.Content); k += 2 {
				if st, err := strconv.Atoi(responses.Content[k].Value); err == nil && st >= 400 {
					continue
				}
				kept = append(kept, responses.Content[k], responses.Content[k+1])
			}
			responses.Content = kept
			statuses, codes := statusCodes(e)
			for _, st := range statuses {
				responses.Content = append(responses.Content, quoted(strconv.Itoa(st)), problemResponse(codes[st], retryAfter(st, codes[st])))
			}
		}
	}
	if err := setOperationTypes(root.Content[0]); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// setOperationTypes sets the enums of the Operation schema's type and resource.type to the
// registered flows' operation types and aggregate types (app/worker/flows), in the
// registry's order.
func setOperationTypes(doc *yaml.Node) error {
	op := mapValue(mapValue(mapValue(doc, "components"), "schemas"), "Operation")
	props := mapValue(op, "properties")
	resource := mapValue(mapValue(mapValue(props, "resource"), "properties"), "type")
	typ := mapValue(props, "type")
	if typ == nil || resource == nil {
		return fmt.Errorf("openapi.yaml: no components.schemas.Operation with type and resource.type")
	}
	types := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	resources := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	var seen []string
	for _, f := range flows.All() {
		types.Content = append(types.Content, scalar(f.Operation))
		if a := f.Request.AggregateType(); !slices.Contains(seen, a) {
			seen = append(seen, a)
			resources.Content = append(resources.Content, scalar(a))
		}
	}
	setMapValue(typ, "enum", types, 1)
	setMapValue(resource, "enum", resources, 1)
	return nil
}

// problemResponse is an error response: the codes in its description and as the enum of the
// problem's code.
func problemResponse(codes []string, withRetryAfter bool) *yaml.Node {
	enum := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, c := range codes {
		enum.Content = append(enum.Content, scalar(c))
	}
	schema := flowMap(
		"allOf", &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{
			flowMap("$ref", quoted("#/components/schemas/Problem")),
			flowMap("properties", flowMap("code", flowMap("enum", enum))),
		}})
	resp := flowMap("description", quoted(strings.Join(codes, ", ")))
	if withRetryAfter {
		resp.Content = append(resp.Content, scalar("headers"),
			flowMap("Retry-After", flowMap("$ref", quoted("#/components/headers/RetryAfter"))))
	}
	resp.Content = append(resp.Content, scalar("content"),
		flowMap("application/problem+json", flowMap("schema", schema)))
	return resp
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

func quoted(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Style: yaml.SingleQuotedStyle}
}

func flowMap(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, scalar(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setMapValue sets key to v in m, inserting it at position at when absent.
func setMapValue(m *yaml.Node, key string, v *yaml.Node, at int) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = slices.Insert(m.Content, 2*at, scalar(key), v)
}

// renderAPIDoc replaces the generated part of docs/http-api.md: one row per operation with
// its operationId and its error codes by status.
func renderAPIDoc(md []byte, endpoints []Endpoint) ([]byte, error) {
	s := string(md)
	begin, end := strings.Index(s, apiDocBegin), strings.Index(s, apiDocEnd)
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("docs/http-api.md: the lines %q and %q must enclose the generated part", apiDocBegin, apiDocEnd)
	}
	var b strings.Builder
	b.WriteString(apiDocBegin + "\n\n| operation | operationId | errors |\n|---|---|---|\n")
	for _, e := range endpoints {
		if e.Errors == nil {
			continue
		}
		statuses, codes := statusCodes(e)
		var cells []string
		for _, st := range statuses {
			cells = append(cells, fmt.Sprintf("%d `%s`", st, strings.Join(codes[st], "`, `")))
		}
		fmt.Fprintf(&b, "| `%s %s` | `%s` | %s |\n", e.Method, e.Path, e.OperationID, strings.Join(cells, "; "))
	}
	b.WriteString("\n")
	return []byte(s[:begin] + b.String() + s[end:]), nil
}

var _ = domain.ErrInternal
