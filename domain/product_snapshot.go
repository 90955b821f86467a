package domain

// ProductSnapshot is a product's content at one revision, frozen. The command that starts a
// task about a product (a publication, an AI task) captures it in the transaction that reads
// the product, and the task keeps it: workers use the snapshot, never the product's current
// content, so every delivery of the task works on the content that was requested, whatever
// drafts were saved since.
//
// It holds product content only: no credentials, tokens or other secrets. Its JSON form is
// how the task tables store it (sql/007_task_snapshots.sql); it never travels in events.
type ProductSnapshot struct {
	// Revision is the product revision the content is of (Product.Revision).
	Revision    int      `json:"revision"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Price       string   `json:"price"`
	Currency    string   `json:"currency"`
	Images      []string `json:"images"`
}

// Snapshot returns the product's current content and revision as a ProductSnapshot that
// shares no memory with p.
func (p Product) Snapshot() ProductSnapshot {
	images := make([]string, len(p.Images))
	copy(images, p.Images)
	return ProductSnapshot{Revision: p.Revision, Title: p.Title, Description: p.Description, Price: p.Price,
		Currency: p.Currency, Images: images}
}
