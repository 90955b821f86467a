package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file serves the OpenAPI document: /openapi.yaml with the service's own base URL as
// its server, and /docs, the same document rendered on the server as one self-contained
// HTML page (inline CSS, no scripts, nothing fetched from elsewhere: it reads offline).

// servedDocument returns the OpenAPI document with its first servers entry set to baseURL
// (unchanged when baseURL is empty).
func servedDocument(doc []byte, baseURL string) ([]byte, error) {
	if baseURL == "" {
		return doc, nil
	}
	re := regexp.MustCompile(`(?m)^servers:\n  - url: .*$`)
	loc := re.FindIndex(doc)
	if loc == nil {
		return nil, errors.New("httpapi: openapi.yaml has no servers entry to name PUBLIC_BASE_URL")
	}
	var out bytes.Buffer
	out.Write(doc[:loc[0]])
	fmt.Fprintf(&out, "servers:\n  - url: %s", strconv.Quote(baseURL)) // a JSON string is a YAML scalar
	out.Write(doc[loc[1]:])
	return out.Bytes(), nil
}

// docSchema is the part of a JSON Schema the page shows.
type docSchema struct {
	Ref         string      `yaml:"$ref"`
	Type        any         `yaml:"type"`
	Format      string      `yaml:"format"`
	Description string      `yaml:"description"`
	Enum        []any       `yaml:"enum"`
	Items       *docSchema  `yaml:"items"`
	Required    []string    `yaml:"required"`
	Properties  yaml.Node   `yaml:"properties"`
	OneOf       []docSchema `yaml:"oneOf"`
	MaxLength   *int        `yaml:"maxLength"`
}

type docParam struct {
	Ref         string    `yaml:"$ref"`
	Name        string    `yaml:"name"`
	In          string    `yaml:"in"`
	Description string    `yaml:"description"`
	Required    bool      `yaml:"required"`
	Schema      docSchema `yaml:"schema"`
}

type docResponse struct {
	Ref         string                                `yaml:"$ref"`
	Description string                                `yaml:"description"`
	Content     map[string]struct{ Schema docSchema } `yaml:"content"`
}

type docOperation struct {
	Summary     string     `yaml:"summary"`
	Description string     `yaml:"description"`
	Parameters  []docParam `yaml:"parameters"`
	Security    *[]any     `yaml:"security"`
	RequestBody *struct {
		Required bool                                  `yaml:"required"`
		Content  map[string]struct{ Schema docSchema } `yaml:"content"`
	} `yaml:"requestBody"`
	Responses yaml.Node `yaml:"responses"`
}

type docSpec struct {
	Info struct {
		Title       string `yaml:"title"`
		Version     string `yaml:"version"`
		Description string `yaml:"description"`
	} `yaml:"info"`
	Servers []struct {
		URL string `yaml:"url"`
	} `yaml:"servers"`
	Paths      yaml.Node `yaml:"paths"`
	Components struct {
		Parameters map[string]docParam    `yaml:"parameters"`
		Responses  map[string]docResponse `yaml:"responses"`
		Schemas    yaml.Node              `yaml:"schemas"`
	} `yaml:"components"`
}

// Page model.
type (
	pageField struct {
		Name, Type, Description string
		Required                bool
		Ref                     string
	}
	pageResponse struct {
		Code, Description, Schema string
	}
	pageOperation struct {
		ID, Method, Path, Summary, Description string
		Public                                 bool
		Parameters                             []pageField
		Body, BodyNote                         string
		BodyFields                             []pageField
		Responses                              []pageResponse
	}
	pageSchema struct {
		Name, Description string
		Fields            []pageField
	}
	page struct {
		Title, Version, Server string
		Description            template.HTML
		Operations             []pageOperation
		Schemas                []pageSchema
	}
)

// renderDocs renders the OpenAPI document doc as an HTML page.
func renderDocs(doc []byte) ([]byte, error) {
	var spec docSpec
	if err := yaml.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("httpapi: openapi.yaml: %w", err)
	}
	p := page{Title: spec.Info.Title, Version: spec.Info.Version, Description: prose(spec.Info.Description)}
	if len(spec.Servers) > 0 {
		p.Server = spec.Servers[0].URL
	}
	paths := &spec.Paths
	for i := 0; i+1 < len(paths.Content); i += 2 {
		path, item := paths.Content[i].Value, paths.Content[i+1]
		var common []docParam
		for j := 0; j+1 < len(item.Content); j += 2 {
			if item.Content[j].Value == "parameters" {
				if err := item.Content[j+1].Decode(&common); err != nil {
					return nil, fmt.Errorf("httpapi: openapi.yaml %s parameters: %w", path, err)
				}
			}
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			method := item.Content[j].Value
			if method == "parameters" {
				continue
			}
			var op docOperation
			if err := item.Content[j+1].Decode(&op); err != nil {
				return nil, fmt.Errorf("httpapi: openapi.yaml %s %s: %w", method, path, err)
			}
			p.Operations = append(p.Operations, spec.operation(method, path, common, op))
		}
	}
	schemas := &spec.Components.Schemas
	for i := 0; i+1 < len(schemas.Content); i += 2 {
		var s docSchema
		if err := schemas.Content[i+1].Decode(&s); err != nil {
			return nil, fmt.Errorf("httpapi: openapi.yaml schema %s: %w", schemas.Content[i].Value, err)
		}
		p.Schemas = append(p.Schemas, pageSchema{Name: schemas.Content[i].Value, Description: s.Description, Fields: fields(s)})
	}
	var out bytes.Buffer
	if err := docsPage.Execute(&out, p); err != nil {
		return nil, fmt.Errorf("httpapi: rendering /docs: %w", err)
	}
	return out.Bytes(), nil
}

func (spec docSpec) operation(method, path string, common []docParam, op docOperation) pageOperation {
	o := pageOperation{Method: strings.ToUpper(method), Path: path, Summary: op.Summary, Description: op.Description,
		Public: op.Security != nil && len(*op.Security) == 0}
	o.ID = strings.ToLower(o.Method) + strings.NewReplacer("/", "-", "{", "", "}", "", ".", "-").Replace(path)
	for _, prm := range append(append([]docParam{}, common...), op.Parameters...) {
		if name, ok := strings.CutPrefix(prm.Ref, "#/components/parameters/"); ok {
			prm = spec.Components.Parameters[name]
		}
		o.Parameters = append(o.Parameters, pageField{Name: prm.Name + " (" + prm.In + ")", Type: typeOf(prm.Schema),
			Description: prm.Description, Required: prm.Required, Ref: refName(prm.Schema.Ref)})
	}
	if rb := op.RequestBody; rb != nil {
		for ct, c := range rb.Content {
			o.Body = ct
			if name := refName(c.Schema.Ref); name != "" {
				o.BodyNote = name
			} else {
				o.BodyFields = fields(c.Schema)
			}
		}
		if !rb.Required {
			o.Body += " (optional)"
		}
	}
	codes := &op.Responses
	for i := 0; i+1 < len(codes.Content); i += 2 {
		var r docResponse
		if err := codes.Content[i+1].Decode(&r); err != nil {
			continue
		}
		if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
			r = spec.Components.Responses[name]
		}
		resp := pageResponse{Code: codes.Content[i].Value, Description: r.Description}
		cts := make([]string, 0, len(r.Content))
		for ct := range r.Content {
			cts = append(cts, ct)
		}
		sort.Strings(cts)
		for _, ct := range cts {
			if name := refName(r.Content[ct].Schema.Ref); name != "" && name != "Problem" {
				resp.Schema = name
			}
		}
		o.Responses = append(o.Responses, resp)
	}
	return o
}

// fields lists the properties of an object schema, in document order.
func fields(s docSchema) []pageField {
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	var out []pageField
	props := &s.Properties
	for i := 0; i+1 < len(props.Content); i += 2 {
		var f docSchema
		if err := props.Content[i+1].Decode(&f); err != nil {
			continue
		}
		name := props.Content[i].Value
		ref := refName(f.Ref)
		if ref == "" && f.Items != nil {
			ref = refName(f.Items.Ref)
		}
		out = append(out, pageField{Name: name, Type: typeOf(f), Description: f.Description, Required: req[name], Ref: ref})
	}
	return out
}

// typeOf writes a schema's type the way a reader says it: "string (uuid)", "array of Store",
// "one of: pending, running".
func typeOf(s docSchema) string {
	if name := refName(s.Ref); name != "" {
		return name
	}
	var t string
	switch v := s.Type.(type) {
	case string:
		t = v
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
		}
		t = strings.Join(parts, " or ")
	}
	if t == "array" && s.Items != nil {
		t = "array of " + typeOf(*s.Items)
	}
	if s.Format != "" {
		t += " (" + s.Format + ")"
	}
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			vals[i] = fmt.Sprint(v)
		}
		t += ": " + strings.Join(vals, " | ")
	}
	if s.MaxLength != nil {
		t += fmt.Sprintf(", ≤ %d chars", *s.MaxLength)
	}
	if t == "" && len(s.OneOf) > 0 {
		alts := make([]string, len(s.OneOf))
		for i, a := range s.OneOf {
			alts[i] = typeOf(a)
		}
		t = "one of " + strings.Join(alts, ", ")
	}
	if t == "" {
		t = "any"
	}
	return t
}

func refName(ref string) string {
	name, _ := strings.CutPrefix(ref, "#/components/schemas/")
	if name == ref {
		return ""
	}
	return name
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// prose renders a description: escaped text, `code` spans, blank lines between paragraphs.
func prose(s string) template.HTML {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if para = strings.TrimSpace(para); para == "" {
			continue
		}
		esc := template.HTMLEscapeString(strings.Join(strings.Fields(para), " "))
		b.WriteString("<p>" + codeSpan.ReplaceAllString(esc, "<code>$1</code>") + "</p>\n")
	}
	return template.HTML(b.String()) // escaped above; only <p> and <code> are added
}

var docsPage = template.Must(template.New("docs").Funcs(template.FuncMap{
	"prose": prose,
	"lower": strings.ToLower,
	// inline is prose without its paragraph, for table cells and summaries.
	"inline": func(s string) template.HTML {
		return template.HTML(strings.TrimSuffix(strings.TrimPrefix(string(prose(s)), "<p>"), "</p>\n"))
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} {{.Version}}</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#fafbfc}
main{max-width:1000px;margin:0 auto;padding:1.5rem 1.25rem 4rem}
h1{margin:.2rem 0}h2{margin-top:2.5rem;border-bottom:2px solid #d8dee4;padding-bottom:.3rem}
code{font:13px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eef1f4;padding:.05rem .3rem;border-radius:3px}
a{color:#0b5cad;text-decoration:none}a:hover{text-decoration:underline}
nav ul{list-style:none;padding:0;columns:2;column-gap:2rem}nav li{margin:.1rem 0;break-inside:avoid}
.m{display:inline-block;min-width:3.6rem;text-align:center;font:bold 12px ui-monospace,monospace;color:#fff;border-radius:3px;padding:.1rem .3rem;margin-right:.4rem}
.get{background:#1f7a4d}.post{background:#0b5cad}.put{background:#a05a00}.delete{background:#b42318}.patch{background:#6b3fa0}
section.op{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:.8rem 1rem;margin:1rem 0}
section.op h3{margin:.1rem 0 .4rem;font-size:1rem}.path{font:600 14px ui-monospace,monospace;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:.4rem 0;font-size:14px}th,td{text-align:left;vertical-align:top;border-top:1px solid #e6e9ed;padding:.3rem .5rem}
th{font-weight:600;color:#57606a;font-size:13px}.req{color:#b42318;font-size:12px}.tag{color:#57606a;font-size:13px}
</style></head><body><main>
<h1>{{.Title}}</h1><p class="tag">version {{.Version}}{{if .Server}} · server <code>{{.Server}}</code>{{end}} · <a href="/openapi.yaml">openapi.yaml</a></p>
{{.Description}}
<nav><h2>Endpoints</h2><ul>{{range .Operations}}<li><a href="#{{.ID}}"><span class="m {{lower .Method}}">{{.Method}}</span><span class="path">{{.Path}}</span></a></li>{{end}}</ul></nav>
<h2>Operations</h2>
{{range .Operations}}<section class="op" id="{{.ID}}">
<h3><span class="m {{lower .Method}}">{{.Method}}</span><span class="path">{{.Path}}</span></h3>
<div>{{inline .Summary}}{{if .Public}} <span class="tag">(no authentication)</span>{{end}}</div>
{{if .Description}}{{prose .Description}}{{end}}
{{if .Parameters}}<table><tr><th>parameter</th><th>type</th><th>description</th></tr>
{{range .Parameters}}<tr><td><code>{{.Name}}</code>{{if .Required}} <span class="req">required</span>{{end}}</td><td>{{.Type}}</td><td>{{inline .Description}}</td></tr>{{end}}</table>{{end}}
{{if .Body}}<p><b>Body</b> <code>{{.Body}}</code>{{if .BodyNote}}: <a href="#schema-{{.BodyNote}}">{{.BodyNote}}</a>{{end}}</p>
{{if .BodyFields}}<table><tr><th>field</th><th>type</th><th>description</th></tr>
{{range .BodyFields}}<tr><td><code>{{.Name}}</code>{{if .Required}} <span class="req">required</span>{{end}}</td><td>{{if .Ref}}<a href="#schema-{{.Ref}}">{{.Type}}</a>{{else}}{{.Type}}{{end}}</td><td>{{inline .Description}}</td></tr>{{end}}</table>{{end}}{{end}}
<table><tr><th>status</th><th>response</th></tr>
{{range .Responses}}<tr><td><code>{{.Code}}</code></td><td>{{inline .Description}}{{if .Schema}} — <a href="#schema-{{.Schema}}">{{.Schema}}</a>{{end}}</td></tr>{{end}}</table>
</section>{{end}}
<h2>Schemas</h2>
{{range .Schemas}}<section class="op" id="schema-{{.Name}}"><h3>{{.Name}}</h3>{{if .Description}}{{prose .Description}}{{end}}
{{if .Fields}}<table><tr><th>field</th><th>type</th><th>description</th></tr>
{{range .Fields}}<tr><td><code>{{.Name}}</code>{{if .Required}} <span class="req">required</span>{{end}}</td><td>{{if .Ref}}<a href="#schema-{{.Ref}}">{{.Type}}</a>{{else}}{{.Type}}{{end}}</td><td>{{inline .Description}}</td></tr>{{end}}</table>{{end}}
</section>{{end}}
</main></body></html>
`))
