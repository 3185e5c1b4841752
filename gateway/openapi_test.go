package gateway_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
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

// Each operation of the document says what the gateway does: a route that
// needs a token has the document's bearer security and documents 401, a
// public one has none, and every answer of the probes below (no token, a
// token whose prefixes exclude the name, a name too long, an unknown
// session, and, to an operation with a body, a body of another media
// type, with an unknown field, with a null field, or too large) has its
// status among the operation's documented responses.
func TestOpenAPIStatuses(t *testing.T) {
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"ops","token":"ops-secret-0123456789","prefixes":[""],"admin":true},
		{"name":"narrow","token":"narrow-secret-0123456789","prefixes":["other/"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, memlock.New(), gateway.WithTokens(tokens))
	var doc struct {
		Security []json.RawMessage `json:"security"`
		Paths    map[string]map[string]struct {
			Security    *[]json.RawMessage         `json:"security"`
			RequestBody json.RawMessage            `json:"requestBody"`
			Responses   map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(committed, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Security) == 0 {
		t.Fatal("openapi.json has no security at its top")
	}
	const admin, narrow = "ops-secret-0123456789", "narrow-secret-0123456789"
	auth := gateway.Authenticated(g.g)
	probes := 0
	for path, methods := range gateway.Routes(g.g) {
		for _, m := range methods {
			op, ok := doc.Paths[path][lower(m)]
			if !ok {
				continue // TestOpenAPIDocument names it
			}
			what := m + " " + path
			public := op.Security != nil && len(*op.Security) == 0
			if public == auth[path] {
				t.Errorf("%s: the document says public %v, the gateway needs a token %v", what, public, auth[path])
			}
			if auth[path] && op.Responses["401"] == nil {
				t.Errorf("%s needs a token and documents no 401", what)
			}
			documented := func(probe, p, token string, body any) {
				t.Helper()
				a := g.do(m, p, token, body)
				probes++
				if op.Responses[strconv.Itoa(a.status)] == nil {
					t.Errorf("%s %s: %s answered %d, which the document does not list: %s", what, p, probe, a.status, a.raw)
				}
			}
			named := strings.Replace(path, "{id}", "XXXXXXXXXX.none", 1)
			if auth[path] {
				documented("without a token", strings.Replace(named, "{name}", "n", 1), "", nil)
			}
			if strings.Contains(path, "{name}") {
				documented("to a token without the name", strings.Replace(named, "{name}", "jobs", 1), narrow, nil)
				documented("with a name too long", strings.Replace(named, "{name}", strings.Repeat("n", 600), 1), admin, nil)
			}
			p := strings.Replace(named, "{name}", "n", 1)
			if strings.Contains(path, "{id}") {
				documented("with an unknown session", p, admin, nil)
			}
			if op.RequestBody != nil {
				documented("with an unknown field", p, admin, `{"unknown_field": 1}`)
				documented("with a null field", p, admin, `{"session": null}`)
				documented("with a body too large", p, admin, `{"owner": "`+strings.Repeat("x", gateway.MaxBody)+`"}`)
				a := g.doType(m, p, admin, "text/plain", "{}")
				probes++
				if op.Responses[strconv.Itoa(a.status)] == nil {
					t.Errorf("%s: a text/plain body answered %d, which the document does not list", what, a.status)
				}
			}
		}
	}
	if probes < 40 {
		t.Fatalf("only %d probes", probes)
	}
}

// doType sends body with the content type ct.
func (g *gw) doType(method, path, token, ct, body string) answer {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, raw: raw}
}
