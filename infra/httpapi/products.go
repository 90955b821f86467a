package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
)

type productInput struct {
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Price       string   `json:"price"`
	Currency    string   `json:"currency"`
	Images      []string `json:"images"`
}

func (in productInput) content() domain.ProductContent {
	return domain.ProductContent{Title: in.Title, Description: in.Description, Price: in.Price, Currency: in.Currency, Images: in.Images}
}

type productJSON struct {
	ID          string    `json:"id"`
	Title       string    `json:"title"`
	Description string    `json:"description"`
	Price       string    `json:"price"`
	Currency    string    `json:"currency"`
	Images      []string  `json:"images"`
	Revision    int       `json:"revision"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func productBody(p domain.Product) productJSON {
	images := p.Images
	if images == nil {
		images = []string{} // a list is [], never null
	}
	return productJSON{ID: p.ID.String(), Title: p.Title, Description: p.Description, Price: p.Price,
		Currency: p.Currency, Images: images, Revision: p.Revision, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}
}

func etag(revision int) string { return `"` + strconv.Itoa(revision) + `"` }

// createProduct: POST /v1/workspaces/{ws}/products, idempotent when a key is sent.
func (s *Server) createProduct(w http.ResponseWriter, r *http.Request) {
	var in productInput
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	ws := workspaceID(r.Context())
	render := func(result any) (bus.Response, error) {
		p := result.(domain.Product)
		return jsonResponse(http.StatusCreated, map[string]any{"product": productBody(p)}, map[string]string{
			"ETag":     etag(p.Revision),
			"Location": fmt.Sprintf("/v1/workspaces/%s/products/%s", ws, p.ID),
		})
	}
	idem, err := s.idempotency(r, body, false, render)
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.CreateProduct, bus.Request[commands.CreateProduct]{
		Command:     commands.CreateProduct{ProductID: domain.NewID(), WorkspaceID: ws, Content: in.content()},
		Actor:       s.actor(r),
		Idempotency: idem,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.respond(w, r, reply.Response, reply.Replayed, idem != nil, reply.Result, render)
}

func productID(r *http.Request) (uuid.UUID, error) {
	return pathID(r, "product_id", domain.ErrProductNotFound)
}

func (s *Server) getProduct(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p, err := s.app.Queries.Product(r.Context(), s.scope(r), id)
	if err != nil {
		writeError(w, r, notFoundAs(err, domain.ErrProductNotFound))
		return
	}
	w.Header().Set("ETag", etag(p.Revision))
	writeJSON(w, http.StatusOK, map[string]any{"product": productBody(p)})
}

func (s *Server) listProducts(w http.ResponseWriter, r *http.Request) {
	page, err := pageOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := s.app.Queries.ProductList(r.Context(), s.scope(r), page)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]productJSON, 0, len(items))
	for _, p := range items {
		out = append(out, productBody(p))
	}
	writeJSON(w, http.StatusOK, listBody(out, next))
}

// parseIfMatch reads If-Match: "<revision>", exactly as ETag gives it: a strong ETag holding
// a positive integer in canonical form (no sign, no leading zero). Anything else, "+3" and
// "003" included, is the same 400; no header is 428.
func parseIfMatch(r *http.Request) (int, error) {
	values := r.Header.Values("If-Match")
	if len(values) == 0 {
		return 0, domain.ErrPreconditionRequired
	}
	malformed := domain.Invalid("If-Match", `must be a single "<revision>" as returned in ETag`)
	v := strings.TrimSpace(values[0])
	if len(values) != 1 || len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return 0, malformed
	}
	n, err := strconv.Atoi(v[1 : len(v)-1])
	if err != nil || n < 1 || etag(n) != v {
		return 0, malformed
	}
	return n, nil
}

// saveProductDraft: PUT …/products/{id}/draft with If-Match (no idempotency: the revision
// handles concurrency).
func (s *Server) saveProductDraft(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	revision, err := parseIfMatch(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var in productInput
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.SaveProductDraft, bus.Request[commands.SaveProductDraft]{
		Command: commands.SaveProductDraft{ProductID: id, ExpectedRevision: revision, Content: in.content()},
		Actor:   s.actor(r),
	})
	if err != nil {
		writeError(w, r, notFoundAs(err, domain.ErrProductNotFound))
		return
	}
	w.Header().Set("ETag", etag(reply.Result.Revision))
	writeJSON(w, http.StatusOK, map[string]any{"product": productBody(reply.Result)})
}
