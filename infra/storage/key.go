package storage

import (
	"strings"
	"unicode/utf8"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// MaxKeyLen bounds an object key in bytes.
const MaxKeyLen = 1024

// Errors specific to this package (the port declares the shared ones).
var (
	// ErrSizeMismatch: Put got fewer bytes than the size it was told.
	ErrSizeMismatch = domain.NewError(domain.KindInvalid, "OBJECT_SIZE_MISMATCH", "the object has fewer bytes than declared")
	// ErrUploadTokenInvalid: the upload token is malformed, forged or names an invalid key.
	ErrUploadTokenInvalid = domain.NewError(domain.KindForbidden, "UPLOAD_TOKEN_INVALID", "the upload URL is not valid")
	// ErrUploadTokenExpired: the upload token's time is up; ask for a new upload URL.
	ErrUploadTokenExpired = domain.NewError(domain.KindForbidden, "UPLOAD_TOKEN_EXPIRED", "the upload URL has expired")
	// ErrUploadAlreadyCompleted: the grant's upload is complete (the object exists); the
	// stored object is never replaced through an upload URL.
	ErrUploadAlreadyCompleted = domain.NewError(domain.KindConflict, "UPLOAD_ALREADY_COMPLETED", "this upload is already complete; its object cannot be replaced")
	// ErrUploadContentType: the upload's Content-Type differs from the one granted.
	ErrUploadContentType = domain.NewError(domain.KindUnsupportedMedia, "UPLOAD_CONTENT_TYPE_MISMATCH", "the Content-Type differs from the one announced")
)

// ValidateKey returns port.ErrObjectKeyInvalid unless key is a clean relative object key.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen || !utf8.ValidString(key) {
		return port.ErrObjectKeyInvalid
	}
	if strings.HasPrefix(key, "/") || strings.ContainsRune(key, '\\') {
		return port.ErrObjectKeyInvalid
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return port.ErrObjectKeyInvalid
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return port.ErrObjectKeyInvalid
		}
	}
	return nil
}
