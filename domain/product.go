package domain

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

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
	ErrProductNotFound  = NewError(KindNotFound, "PRODUCT_NOT_FOUND", "the product does not exist")
	ErrRevisionMismatch = NewError(KindPreconditionFailed, "REVISION_MISMATCH",
		"the product changed since the revision given in If-Match")
	ErrPreconditionRequired = NewError(KindPreconditionRequired, "PRECONDITION_REQUIRED",
		`If-Match: "<revision>" is required`)
)

var (
	priceRe    = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})(\.[0-9]{1,4})?$`)
	currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)
)

// Validate checks the content and returns it normalized (trimmed title).
func (c ProductContent) Validate() (ProductContent, error) {
	c.Title = strings.TrimSpace(c.Title)
	if c.Title == "" {
		return c, Invalid("title", "required")
	}
	if err := checkLine("title", c.Title, MaxTitleLength); err != nil {
		return c, err
	}
	if err := checkText("description", c.Description, MaxDescriptionLength, lineBreaks); err != nil {
		return c, err
	}
	switch {
	case !priceRe.MatchString(c.Price):
		return c, Invalid("price", `must be a decimal string such as "19.90"`)
	case !currencyRe.MatchString(c.Currency):
		return c, Invalid("currency", "must be an ISO 4217 code such as EUR")
	case len(c.Images) > MaxProductImages:
		return c, Invalid("images", fmt.Sprintf("at most %d images", MaxProductImages))
	}
	if c.Images == nil {
		c.Images = []string{}
	}
	for _, img := range c.Images {
		if err := checkLine("images", img, MaxImageURLLength); err != nil {
			return c, err
		}
		u, err := url.Parse(img)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
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
