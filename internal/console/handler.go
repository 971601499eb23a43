package console

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// The console's paths. Path is where it is served; the API lives under
// APIPath.
const (
	Path         = "/weir/"
	APIPath      = Path + "api/"
	InstancePath = APIPath + "instance"
	ClusterPath  = APIPath + "cluster"
	TopologyPath = APIPath + "topology"
)

// setSecurityHeaders sets the headers of every answer: the page runs
// only its own script and style, from this origin, reads only this
// origin, and is not framed.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// ServeHTTP serves the page and the API under Path. Every request passes
// the Backend's Authorize first (403 when refused); only GET and HEAD are
// answered (405 otherwise); a path that is neither an asset nor an API
// endpoint is 404.
func (c *Console) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	setSecurityHeaders(w.Header())
	if c.b.Authorize(req) != nil {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch p := req.URL.Path; {
	case p == InstancePath:
		reply(w, c.Instance(c.b.Details(req)))
	case p == ClusterPath:
		reply(w, c.Cluster(req.Context(), c.b.Details(req)))
	case p == TopologyPath:
		reply(w, c.b.Topology())
	case strings.HasPrefix(p, APIPath):
		http.NotFound(w, req)
	default:
		c.serveAsset(w, req, strings.TrimPrefix(p, Path))
	}
}

// reply writes v as JSON, not to be cached.
func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// contentType returns the type of an asset by its extension; false for
// an extension the page has no file of.
func contentType(ext string) (string, bool) {
	switch ext {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	}
	return "", false
}

// serveAsset serves the embedded file name ("" is index.html).
func (c *Console) serveAsset(w http.ResponseWriter, req *http.Request, name string) {
	if name == "" {
		name = "index.html"
	}
	ct, ok := contentType(path.Ext(name))
	if !ok || strings.Contains(name, "/") {
		http.NotFound(w, req)
		return
	}
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	if req.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}
