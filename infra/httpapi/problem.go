package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/listingkit/listing/domain"
)

// Problem is an RFC 9457 problem detail with our stable upper-snake Code.
type Problem struct {
	Type      string            `json:"type"`
	Title     string            `json:"title"`
	Status    int               `json:"status"`
	Detail    string            `json:"detail,omitempty"`
	Code      string            `json:"code"`
	Instance  string            `json:"instance,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
	Errors    map[string]string `json:"errors,omitempty"`
}

// ProblemTypeBase prefixes problem types; the code completes the URI.
const ProblemTypeBase = "https://listing.dev/problems/"

var kindStatus = map[domain.Kind]int{
	domain.KindInternal:             http.StatusInternalServerError,
	domain.KindInvalid:              http.StatusBadRequest,
	domain.KindUnauthenticated:      http.StatusUnauthorized,
	domain.KindForbidden:            http.StatusForbidden,
	domain.KindNotFound:             http.StatusNotFound,
	domain.KindConflict:             http.StatusConflict,
	domain.KindPreconditionFailed:   http.StatusPreconditionFailed,
	domain.KindPreconditionRequired: http.StatusPreconditionRequired,
	domain.KindTooLarge:             http.StatusRequestEntityTooLarge,
	domain.KindUnsupportedMedia:     http.StatusUnsupportedMediaType,
	domain.KindRateLimited:          http.StatusTooManyRequests,
	domain.KindUnavailable:          http.StatusServiceUnavailable,
}

// StatusOf returns the HTTP status for a domain error kind.
func StatusOf(kind domain.Kind) int {
	if s, ok := kindStatus[kind]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// writeError maps err to a problem response. Only *domain.Error reaches the client with its
// code and message; anything else is a 500 INTERNAL without detail, logged with the request id.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var de *domain.Error
	if !errors.As(err, &de) || de.Kind == domain.KindInternal {
		loggerFrom(r.Context()).ErrorContext(r.Context(), "request failed", "request_id", requestID(r.Context()), "err", err)
		writeProblem(w, r, Problem{Status: http.StatusInternalServerError, Code: domain.ErrInternal.Code,
			Title: "Internal error", Detail: "the request failed; quote the request id when reporting it"})
		return
	}
	status := StatusOf(de.Kind)
	if de.RetryAfter > 0 {
		secs := int(de.RetryAfter.Seconds() + 0.999)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeProblem(w, r, Problem{Status: status, Code: de.Code, Title: http.StatusText(status), Detail: de.Message, Errors: de.Fields})
}

func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	p.Type = ProblemTypeBase + p.Code
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	p.Instance = r.URL.Path
	p.RequestID = requestID(r.Context())
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
