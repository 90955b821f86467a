package httpapi

import (
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/listingkit/listing/app/bus"
)

// Header names of the idempotency contract (API.md).
const (
	HeaderIdempotencyKey       = "Idempotency-Key"
	HeaderIdempotentReplayed   = "Idempotent-Replayed"
	HeaderIdempotencyRetention = "Idempotency-Retention"
)

// idempotency builds the bus.Idempotency of an idempotent request. When required is false
// and no key is sent, it returns nil (the request runs once, without a record).
func (s *Server) idempotency(r *http.Request, body []byte, required bool, render bus.RenderFunc) (*bus.Idempotency, error) {
	values := r.Header.Values(HeaderIdempotencyKey)
	if !required && len(values) == 0 {
		return nil, nil
	}
	key, err := s.deps.Idempotency.ParseKey(values)
	if err != nil {
		return nil, err
	}
	headers := map[string]string{"Content-Type": r.Header.Get("Content-Type")}
	if v := r.Header.Get("If-Match"); v != "" {
		headers["If-Match"] = v
	}
	return &bus.Idempotency{
		Key:         key,
		Method:      r.Method,
		Path:        normalizePath(r.URL.Path),
		Fingerprint: bus.FingerprintInput{Body: body, Headers: headers},
		Render:      render,
	}, nil
}

// normalizePath is the path part of the idempotency scope: cleaned, lowercased (our paths
// are lowercase ASCII and UUIDs, which compare case-insensitively), without a trailing slash.
func normalizePath(p string) string {
	return strings.ToLower(path.Clean("/" + p))
}

// respond writes the outcome of a command: the response rendered inside the transaction when
// there is one (first execution or replay of an idempotent request), else render(result).
func (s *Server) respond(w http.ResponseWriter, r *http.Request, resp *bus.Response, replayed, idempotent bool, result any, render bus.RenderFunc) {
	if resp == nil {
		rendered, err := render(result)
		if err != nil {
			writeError(w, r, err)
			return
		}
		resp = &rendered
	}
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Cache-Control", "no-store")
	if idempotent {
		w.Header().Set(HeaderIdempotencyRetention, strconv.Itoa(int(s.deps.Idempotency.Retention().Seconds())))
	}
	if replayed {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// jsonResponse renders v as a JSON response with extra headers.
func jsonResponse(status int, v any, header map[string]string) (bus.Response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return bus.Response{}, err
	}
	h := map[string]string{"Content-Type": "application/json"}
	for k, val := range header {
		h[k] = val
	}
	return bus.Response{Status: status, Header: h, Body: body}, nil
}
