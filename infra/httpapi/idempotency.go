package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/idem"
)

// idempotency builds the bus.Idempotency of an idempotent request. When required is false
// and no key is sent, it returns nil (the request runs once, without a record). A command
// that arrives as a message has its own (messageIdempotency).
func (s *Server) idempotency(r *http.Request, body []byte, required bool, render bus.RenderFunc) (*bus.Idempotency, error) {
	values := r.Header.Values(idem.HeaderKey)
	if !required && len(values) == 0 {
		return nil, nil
	}
	key, err := idem.ParseKey(values)
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
		Path:        r.URL.Path, // the middleware normalizes it
		Fingerprint: bus.FingerprintInput{Body: body, Headers: headers},
		Render:      render,
	}, nil
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
		w.Header().Set(idem.HeaderRetention, s.deps.Idempotency.RetentionHeader())
	}
	if replayed {
		w.Header().Set(idem.HeaderReplayed, "true")
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
