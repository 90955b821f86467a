package port

import (
	"io"

	"github.com/listingkit/listing/domain"
)

// ImageInfo describes an inspected image (the shape of infra/imaging.Info).
type ImageInfo struct {
	// ContentType is sniffed from the content.
	ContentType string
	Width       int
	Height      int
	// Size is the number of bytes read.
	Size int64
}

// ImageVariant is a derived image and its encoded bytes (the shape of infra/imaging.Derived).
// ImageVariant.Name must be usable as a path segment of an object key.
type ImageVariant struct {
	Variant domain.MediaVariant
	Bytes   []byte
}

// InspectImageFunc reads at most maxBytes+1 bytes of r, validates the image they hold (checking
// its decode budget from the header before any pixel is decoded) and decodes it. Invalid
// content, and an image whose decoding would exceed the budget, is a *domain.Error of a
// non-transient kind (too large, unsupported type, corrupt); other errors are read errors.
type InspectImageFunc func(r io.Reader, maxBytes int64) (InspectedImage, error)

// InspectedImage is an image InspectImageFunc validated and decoded. It holds the decoded pixels until
// it is dropped.
type InspectedImage struct {
	Info ImageInfo
	// Data is the bytes read: the original.
	Data []byte
	// DeriveFunc derives the variants from the decoded pixels (no second decode),
	// deterministically: the same bytes give the same variants, in the same order.
	DeriveFunc func() ([]ImageVariant, error)
}
