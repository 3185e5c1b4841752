package gateway_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/gateway"
)

// The document served is the one committed, and it describes every route
// the gateway answers, and no other.
func TestOpenAPIDocument(t *testing.T) {
	g := start(t, fileBackend(t))
	served := g.do("GET", "/v1/openapi.json", "", nil).want(t, 200, "")
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served.raw, committed) {
		t.Fatalf("the served document differs from openapi.json")
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(committed, &doc); err != nil || doc.OpenAPI == "" {
		t.Fatalf("openapi.json: %v", err)
	}
	routes := gateway.Routes(g.g)
	if len(routes) < 8 {
		t.Fatalf("only %d routes: %v", len(routes), routes)
	}
	for path, methods := range routes {
		ops, ok := doc.Paths[path]
		if !ok {
			t.Errorf("openapi.json lacks %s", path)
			continue
		}
		if len(ops) != len(methods) {
			t.Errorf("openapi.json: %s has %d operations, the gateway %v", path, len(ops), methods)
		}
		for _, m := range methods {
			if ops[lower(m)] == nil {
				t.Errorf("openapi.json lacks %s %s", m, path)
			}
		}
	}
	for path := range doc.Paths {
		if _, ok := routes[path]; !ok {
			t.Errorf("openapi.json describes %s, which the gateway does not serve", path)
		}
	}
	// Every route of the document is served: a request of the wrong
	// method gets 405 from a route that exists, never 404.
	for path := range doc.Paths {
		p := bytes.ReplaceAll([]byte(path), []byte("{id}"), []byte("x.y"))
		p = bytes.ReplaceAll(p, []byte("{name}"), []byte("n"))
		if a := g.do("PUT", string(p), "", nil); a.status != 405 {
			t.Errorf("PUT %s: %d, want 405 from a served route", p, a.status)
		}
	}
}

func lower(s string) string { return string(bytes.ToLower([]byte(s))) }

// Every problem type of problem.go has a title, and the document names
// it among the problem types.
func TestOpenAPIProblemTypes(t *testing.T) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "problem.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "urn:distlock:problem:"
	var types []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == gotoken.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, prefix) {
				types = append(types, s)
			}
		}
		return true
	})
	if len(types) < 20 {
		t.Fatalf("only %d problem types in problem.go: %v", len(types), types)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Type struct {
							Description string `json:"description"`
						} `json:"type"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(committed, &doc); err != nil {
		t.Fatal(err)
	}
	desc := doc.Components.Schemas.Problem.Properties.Type.Description
	named := map[string]bool{}
	for _, w := range strings.FieldsFunc(desc, func(r rune) bool { return r == ' ' || r == ',' || r == '.' || r == ';' }) {
		named[w] = true
	}
	for _, typ := range types {
		if gateway.ProblemTitle(typ) == "" {
			t.Errorf("%s has no title", typ)
		}
		if kind := strings.TrimPrefix(typ, prefix); !named[kind] {
			t.Errorf("openapi.json's Problem type does not name %s", kind)
		}
	}
}
