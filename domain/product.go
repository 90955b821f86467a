package domain

import (
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Product is a listing draft owned by a workspace. Revision starts at 1 and grows by one on
// every saved change; clients send it back in If-Match to save a draft (optimistic concurrency).
type Product struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	ProductContent
	Revision  int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ProductContent is the editable part of a product.
type ProductContent struct {
	Title       string
	Description string
	// Price is a decimal string with up to 4 fraction digits, e.g. "19.90".
	Price    string
	Currency string
	Images   []string
}

// Product error codes.
var (
	ErrRevisionMismatch = NewError(KindPreconditionFailed, "REVISION_MISMATCH",
		"the product changed since the revision given in If-Match")
	ErrPreconditionRequired = NewError(KindPreconditionRequired, "PRECONDITION_REQUIRED",
		`If-Match: "<revision>" is required`)
)

var (
	priceRe    = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(\.[0-9]{1,4})?$`)
	currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)
)

// Product content limits.
const (
	MaxTitleLength       = 500
	MaxDescriptionLength = 20000
	MaxProductImages     = 20
)

// Validate checks the content and returns it normalized (trimmed title).
func (c ProductContent) Validate() (ProductContent, error) {
	c.Title = strings.TrimSpace(c.Title)
	switch {
	case c.Title == "":
		return c, Invalid("title", "required")
	case utf8.RuneCountInString(c.Title) > MaxTitleLength:
		return c, Invalid("title", "must have at most 500 characters")
	case utf8.RuneCountInString(c.Description) > MaxDescriptionLength:
		return c, Invalid("description", "must have at most 20000 characters")
	case !priceRe.MatchString(c.Price):
		return c, Invalid("price", `must be a decimal string such as "19.90"`)
	case !currencyRe.MatchString(c.Currency):
		return c, Invalid("currency", "must be an ISO 4217 code such as EUR")
	case len(c.Images) > MaxProductImages:
		return c, Invalid("images", "at most 20 images")
	}
	if c.Images == nil {
		c.Images = []string{}
	}
	for _, img := range c.Images {
		u, err := url.Parse(img)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(img) > 2048 || u.User != nil {
			return c, Invalid("images", "each image must be an http(s) URL without credentials")
		}
	}
	return c, nil
}

// NewProduct returns a product at revision 1.
func NewProduct(id, workspaceID uuid.UUID, content ProductContent, now time.Time) (Product, error) {
	c, err := content.Validate()
	if err != nil {
		return Product{}, err
	}
	return Product{ID: id, WorkspaceID: workspaceID, ProductContent: c, Revision: 1, CreatedAt: now, UpdatedAt: now}, nil
}

// SaveDraft replaces the content when expectedRevision is the current revision.
func (p *Product) SaveDraft(expectedRevision int, content ProductContent, now time.Time) error {
	if expectedRevision != p.Revision {
		return ErrRevisionMismatch
	}
	c, err := content.Validate()
	if err != nil {
		return err
	}
	p.ProductContent = c
	p.Revision++
	p.UpdatedAt = now
	return nil
}
