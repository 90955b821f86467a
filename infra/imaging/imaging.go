package imaging

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"

	"golang.org/x/image/draw"
	"golang.org/x/image/webp"

	"github.com/listingkit/listing/domain"
)

// MaxPixels bounds Width×Height of an accepted image (50 megapixels), checked from the
// header before the pixels are decoded.
const MaxPixels = 50_000_000

// JPEGQuality is the quality of every derived variant.
const JPEGQuality = 85

// Errors of this package: *domain.Error values matched by code with errors.Is.
var (
	// ErrTooLarge: the media has more bytes than allowed.
	ErrTooLarge = domain.NewError(domain.KindTooLarge, "MEDIA_TOO_LARGE", "the media is larger than allowed")
	// ErrUnsupportedType: the content is not one of domain.AllowedMediaTypes.
	ErrUnsupportedType = domain.NewError(domain.KindInvalid, "MEDIA_TYPE_UNSUPPORTED", "the media must be a JPEG, PNG, GIF or WebP image")
	// ErrCorrupt: the content claims an allowed type but does not decode.
	ErrCorrupt = domain.NewError(domain.KindInvalid, "MEDIA_CORRUPT", "the image is corrupt or truncated")
	// ErrTooManyPixels: the image's dimensions exceed MaxPixels.
	ErrTooManyPixels = domain.NewError(domain.KindInvalid, "MEDIA_TOO_MANY_PIXELS", "the image has too many pixels")
)

// Info describes an inspected image.
type Info struct {
	ContentType string // sniffed from the content, one of domain.AllowedMediaTypes
	Width       int
	Height      int
	Size        int64 // bytes read
}

// VariantSpec asks for a variant whose longer side is at most MaxSide pixels.
type VariantSpec struct {
	Name    string
	MaxSide int
}

// DefaultVariants are the variants derived for every media.
var DefaultVariants = []VariantSpec{
	{Name: "thumb", MaxSide: 256},
	{Name: "medium", MaxSide: 1024},
}

// Derived is an encoded variant: JPEG bytes and their description.
type Derived struct {
	Variant domain.MediaVariant
	Bytes   []byte
}

// codec is the decoder pair for one allowed type.
type codec struct {
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

var codecs = map[string]codec{
	"image/jpeg": {jpeg.DecodeConfig, jpeg.Decode},
	"image/png":  {png.DecodeConfig, png.Decode},
	"image/gif":  {gif.DecodeConfig, gif.Decode},
	"image/webp": {webp.DecodeConfig, webp.Decode},
}

// Inspect reads at most maxBytes+1 bytes from r, sniffs and validates the image they hold,
// and returns its description and the bytes. See the package documentation for the checks
// and their errors.
func Inspect(r io.Reader, maxBytes int64) (Info, []byte, error) {
	const op = "imaging.Inspect"
	if maxBytes <= 0 {
		return Info{}, nil, fmt.Errorf("%s: maxBytes must be positive, got %d", op, maxBytes)
	}
	limit := maxBytes
	if limit < math.MaxInt64 {
		limit++ // one byte more tells "too large" from "exactly maxBytes"
	}
	data, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return Info{}, nil, fmt.Errorf("%s: read: %w", op, err)
	}
	if int64(len(data)) > maxBytes {
		return Info{}, nil, fmt.Errorf("%s: %w", op, ErrTooLarge.WithMessage("the media is larger than %d bytes", maxBytes))
	}
	ct, img, err := decode(data)
	if err != nil {
		return Info{}, nil, fmt.Errorf("%s: %w", op, err)
	}
	b := img.Bounds()
	return Info{ContentType: ct, Width: b.Dx(), Height: b.Dy(), Size: int64(len(data))}, data, nil
}

// Derive decodes data once and encodes each variant in order as a JPEG. See the package
// documentation.
func Derive(data []byte, variants []VariantSpec) ([]Derived, error) {
	const op = "imaging.Derive"
	seen := make(map[string]bool, len(variants))
	for _, v := range variants {
		if v.Name == "" || v.MaxSide <= 0 {
			return nil, fmt.Errorf("%s: invalid variant %q: needs a name and a positive MaxSide", op, v.Name)
		}
		if seen[v.Name] {
			return nil, fmt.Errorf("%s: duplicate variant %q", op, v.Name)
		}
		seen[v.Name] = true
	}
	_, src, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out := make([]Derived, 0, len(variants))
	for _, v := range variants {
		b, w, h, err := encodeVariant(src, v.MaxSide)
		if err != nil {
			return nil, fmt.Errorf("%s: variant %q: %w", op, v.Name, err)
		}
		out = append(out, Derived{
			Variant: domain.MediaVariant{Name: v.Name, Width: w, Height: h, Size: int64(len(b))},
			Bytes:   b,
		})
	}
	return out, nil
}

// sniff returns the content type of data, parameters removed.
func sniff(data []byte) string {
	if len(data) >= 12 && string(data[0:4]) == "RIFF" && string(data[8:12]) == "WEBP" {
		return "image/webp"
	}
	ct := http.DetectContentType(data)
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return ct
}

// decode sniffs, checks the header and the pixel count, then decodes the pixels. The image it
// returns has bounds (0,0)-(Width,Height) of the header. Its errors are *domain.Error values,
// not yet wrapped with an operation name.
func decode(data []byte) (string, image.Image, error) {
	if len(data) == 0 {
		return "", nil, ErrUnsupportedType.WithMessage("the media is empty")
	}
	ct := sniff(data)
	c, ok := codecs[ct]
	if !ok || !slices.Contains(domain.AllowedMediaTypes, ct) {
		return "", nil, ErrUnsupportedType.WithCause(fmt.Errorf("sniffed %s", ct))
	}
	cfg, err := c.config(bytes.NewReader(data))
	if err != nil {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s header: %w", ct, err))
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s header: %dx%d", ct, cfg.Width, cfg.Height))
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return "", nil, ErrTooManyPixels.WithMessage("the image is %dx%d pixels; at most %d pixels are allowed",
			cfg.Width, cfg.Height, MaxPixels)
	}
	img, err := c.decode(bytes.NewReader(data))
	if err != nil {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s pixels: %w", ct, err))
	}
	full := image.Rect(0, 0, cfg.Width, cfg.Height)
	b := img.Bounds()
	if b.Empty() || !b.In(full) {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s: header says %dx%d, pixels are %v",
			ct, cfg.Width, cfg.Height, b))
	}
	if b != full {
		// The first frame of a GIF may cover part of its logical screen only.
		img = canvas{Image: img, r: full}
	}
	return ct, img, nil
}

// canvas shows an image on a larger, transparent canvas.
type canvas struct {
	image.Image
	r image.Rectangle
}

func (c canvas) Bounds() image.Rectangle { return c.r }

func (c canvas) At(x, y int) color.Color {
	if !image.Pt(x, y).In(c.Image.Bounds()) {
		return color.Transparent
	}
	return c.Image.At(x, y)
}

// fit returns the size of a w×h image scaled so that its longer side is at most maxSide,
// preserving the aspect ratio and never upscaling.
func fit(w, h, maxSide int) (int, int) {
	long := max(w, h)
	if long <= maxSide {
		return w, h
	}
	// Integer rounding of w*maxSide/long, so the result does not depend on floating point.
	scale := func(n int) int {
		s := int((int64(n)*int64(maxSide)*2 + int64(long)) / (2 * int64(long)))
		return max(s, 1)
	}
	return scale(w), scale(h)
}

// encodeVariant scales src to fit maxSide, flattens it onto white and encodes it as JPEG.
func encodeVariant(src image.Image, maxSide int) ([]byte, int, int, error) {
	sb := src.Bounds()
	w, h := fit(sb.Dx(), sb.Dy(), maxSide)
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(dst, dst.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	if w == sb.Dx() && h == sb.Dy() {
		draw.Draw(dst, dst.Bounds(), src, sb.Min, draw.Over)
	} else {
		draw.CatmullRom.Scale(dst, dst.Bounds(), src, sb, draw.Over, nil)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, dst, &jpeg.Options{Quality: JPEGQuality}); err != nil {
		return nil, 0, 0, fmt.Errorf("encode jpeg: %w", err)
	}
	return buf.Bytes(), w, h, nil
}
