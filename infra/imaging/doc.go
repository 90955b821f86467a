// Package imaging validates uploaded images and derives the resized variants of the media
// flow. It depends on the domain package only, and holds no state: every function is safe for
// concurrent use.
//
// # Inspect
//
// Inspect(r, Limits{MaxBytes, MaxDecodeBytes}) reads at most MaxBytes+1 bytes from r; one
// byte more than MaxBytes is ErrTooLarge, and nothing past that byte is read. The type is
// sniffed from the content, never taken from a client's declaration:
// net/http.DetectContentType, plus the RIFF....WEBP magic for WebP. A type outside
// domain.AllowedMediaTypes (a PDF, an HTML page, a BMP, empty input) is ErrUnsupportedType.
// The header is then read with the decoder of that type alone (image/jpeg, image/png,
// image/gif, golang.org/x/image/webp) and, where that decoder does not tell bit depth or
// progressive coding, by ReadHeader itself; a header that does not decode, or a zero
// dimension, is ErrCorrupt. Width×Height above MaxPixels is ErrTooManyPixels, and the memory
// decoding would take (Header.DecodeBytes: bytes per sample × samples, as the decoder lays
// them out, plus the buffers it holds beside the image, such as a progressive JPEG's
// coefficients) above MaxDecodeBytes (default DefaultMaxDecodeBytes, 128 MiB) is
// ErrTooLarge. Both are decided from the header BEFORE any pixel is decoded, so a small
// file that claims a huge canvas (a decompression bomb) costs no memory. Last, the pixels
// are decoded in full (the first frame of a GIF); data that fails there (a truncated PNG,
// say) is ErrCorrupt. On success Inspect returns an *Image: Info{ContentType, Width, Height,
// Size}, the bytes it read (which the caller stores as the original) and the decoded pixels.
//
// # Derive
//
// Image.Derive(variants) scales the decoded pixels, so an image is decoded once whatever
// it is used for; Derive(data, variants) decodes data first (checked as Inspect checks it,
// within DefaultMaxDecodeBytes). For each VariantSpec in order, the image is scaled so that
// its longer side is at most MaxSide, preserving the aspect ratio (rounded, at least 1
// pixel) and never upscaling: an image that already fits is re-encoded at its own size. A
// source at least twice as large as the variant is first reduced by an integer factor (the
// mean of each k×k block), so the memory scaling takes does not grow with the source
// (DeriveWorkBytes bounds it: 85 MiB for 1024); the rest is golang.org/x/image/draw.CatmullRom.
// Transparency is flattened onto white; the output is baseline JPEG at quality 85 and
// carries no metadata of the original (EXIF, ICC profiles, comments are dropped; EXIF
// orientation is not applied). Each result is a Derived{Variant: domain.MediaVariant{Name,
// Width, Height, Size}, Bytes}. Derivation is deterministic: the same data and variants give
// byte-identical output on every run, so storing a variant twice under
// domain.MediaVariantKey writes the same object. DefaultVariants is thumb (256) and medium
// (1024).
//
// # Errors
//
// Every rejection of the media is a *domain.Error, wrapped with the operation name
// ("imaging.Inspect: …", "imaging.Derive: …"), so errors.Is and errors.As see it:
//
//	ErrTooLarge          KindTooLarge  MEDIA_TOO_LARGE        (is domain.ErrMediaTooLarge);
//	                                                          too many bytes, or over the decode budget
//	ErrUnsupportedType   KindInvalid   MEDIA_TYPE_UNSUPPORTED (domain.ErrMediaTypeUnsupported's code: it matches it)
//	ErrCorrupt           KindInvalid   MEDIA_CORRUPT
//	ErrTooManyPixels     KindInvalid   MEDIA_TOO_MANY_PIXELS
//
// The decoder's own message is kept as the cause (for logs), never in the client message.
// A failure to read r is returned wrapped as it is (not a *domain.Error): it is the caller's
// transport failing, not the media being wrong. Invalid arguments from the caller (MaxBytes
// <= 0, MaxDecodeBytes < 0, a VariantSpec without a name, with MaxSide <= 0, or a duplicate name) are plain
// errors: they are bugs, not client input.
package imaging
