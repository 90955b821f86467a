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
	// ErrTooLarge: the media has more bytes than allowed, or decoding it would take more
	// memory than allowed.
	ErrTooLarge = domain.ErrMediaTooLarge
	// ErrUnsupportedType: the content is not one of domain.AllowedMediaTypes.
	ErrUnsupportedType = domain.NewError(domain.KindInvalid, domain.ErrMediaTypeUnsupported.Code, "the media must be a JPEG, PNG, GIF or WebP image")
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

// DefaultMaxDecodeBytes is the decode budget of Derive and of Limits without one: 128 MiB.
const DefaultMaxDecodeBytes = 128 << 20

// Limits bound what Inspect accepts.
type Limits struct {
	// MaxBytes bounds the encoded image (required, > 0).
	MaxBytes int64
	// MaxDecodeBytes bounds Header.DecodeBytes, the memory decoding the pixels takes;
	// 0 means DefaultMaxDecodeBytes.
	MaxDecodeBytes int64
}

// Image is an inspected image: its description, the bytes read and the decoded pixels.
// Derive uses the pixels, so an image is decoded once however many variants it gets. It is
// safe for concurrent use; it holds Header.DecodeBytes of memory until it is dropped.
type Image struct {
	Info Info
	// Data is the bytes read, which the caller stores as the original.
	Data   []byte
	pixels image.Image
}

// Inspect reads at most lim.MaxBytes+1 bytes from r, sniffs and validates the image they
// hold within lim, and decodes its pixels. See the package documentation for the checks
// and their errors.
func Inspect(r io.Reader, lim Limits) (*Image, error) {
	const op = "imaging.Inspect"
	maxBytes := lim.MaxBytes
	if maxBytes <= 0 || lim.MaxDecodeBytes < 0 {
		return nil, fmt.Errorf("%s: MaxBytes must be positive and MaxDecodeBytes not negative, got %d and %d",
			op, maxBytes, lim.MaxDecodeBytes)
	}
	limit := maxBytes
	if limit < math.MaxInt64 {
		limit++ // one byte more tells "too large" from "exactly maxBytes"
	}
	data, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", op, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%s: %w", op, ErrTooLarge.WithMessage("the media is larger than %d bytes", maxBytes))
	}
	ct, img, err := decode(data, lim.MaxDecodeBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	b := img.Bounds()
	return &Image{Info: Info{ContentType: ct, Width: b.Dx(), Height: b.Dy(), Size: int64(len(data))}, Data: data,
		pixels: img}, nil
}

// Derive decodes data as Inspect does, within DefaultMaxDecodeBytes, then derives the
// variants as Image.Derive does.
func Derive(data []byte, variants []VariantSpec) ([]Derived, error) {
	const op = "imaging.Derive"
	if err := checkVariants(variants); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	_, src, err := decode(data, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return derive(src, variants)
}

// Derive encodes each variant of the image in order as a JPEG. See the package
// documentation.
func (im *Image) Derive(variants []VariantSpec) ([]Derived, error) {
	if err := checkVariants(variants); err != nil {
		return nil, fmt.Errorf("imaging.Derive: %w", err)
	}
	return derive(im.pixels, variants)
}

func checkVariants(variants []VariantSpec) error {
	seen := make(map[string]bool, len(variants))
	for _, v := range variants {
		if v.Name == "" || v.MaxSide <= 0 {
			return fmt.Errorf("invalid variant %q: needs a name and a positive MaxSide", v.Name)
		}
		if seen[v.Name] {
			return fmt.Errorf("duplicate variant %q", v.Name)
		}
		seen[v.Name] = true
	}
	return nil
}

func derive(src image.Image, variants []VariantSpec) ([]Derived, error) {
	out := make([]Derived, 0, len(variants))
	for _, v := range variants {
		b, w, h, err := encodeVariant(src, v.MaxSide)
		if err != nil {
			return nil, fmt.Errorf("imaging.Derive: variant %q: %w", v.Name, err)
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

// decode reads the header, checks the pixel count and the decode budget (maxDecode, 0 for
// DefaultMaxDecodeBytes), then decodes the pixels. The image it returns has bounds
// (0,0)-(Width,Height) of the header. Its errors are *domain.Error values, not yet wrapped
// with an operation name.
func decode(data []byte, maxDecode int64) (string, image.Image, error) {
	if maxDecode == 0 {
		maxDecode = DefaultMaxDecodeBytes
	}
	hd, err := ReadHeader(data)
	if err != nil {
		return "", nil, err
	}
	ct := hd.ContentType
	if hd.DecodeBytes > maxDecode {
		return "", nil, ErrTooLarge.WithMessage("decoding the %dx%d image would take %d bytes of memory; at most %d are allowed",
			hd.Width, hd.Height, hd.DecodeBytes, maxDecode)
	}
	img, err := codecs[ct].decode(bytes.NewReader(data))
	if err != nil {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s pixels: %w", ct, err))
	}
	full := image.Rect(0, 0, hd.Width, hd.Height)
	b := img.Bounds()
	if b.Empty() || !b.In(full) {
		return "", nil, ErrCorrupt.WithCause(fmt.Errorf("%s: header says %dx%d, pixels are %v",
			ct, hd.Width, hd.Height, b))
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

func (c canvas) RGBA64At(x, y int) color.RGBA64 {
	if !image.Pt(x, y).In(c.Image.Bounds()) {
		return color.RGBA64{}
	}
	r, g, b, a := c.Image.At(x, y).RGBA()
	return color.RGBA64{R: uint16(r), G: uint16(g), B: uint16(b), A: uint16(a)}
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
		small := shrink(src, maxSide)
		draw.CatmullRom.Scale(dst, dst.Bounds(), small, small.Bounds(), draw.Over, nil)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, dst, &jpeg.Options{Quality: JPEGQuality}); err != nil {
		return nil, 0, 0, fmt.Errorf("encode jpeg: %w", err)
	}
	return buf.Bytes(), w, h, nil
}

// DeriveWorkBytes bounds the memory Image.Derive holds at once, beyond the decoded image,
// for a variant whose longer side is at most maxSide, whatever the size of the source:
// the reduced copy of the source (under (2·maxSide)² × 4 bytes, see shrink), the scaler's
// scratch (maxSide × 2·maxSide × 32 bytes), the variant (maxSide² × 4 bytes) and its
// JPEG encoding (under maxSide² bytes): 85 MiB for 1024.
func DeriveWorkBytes(maxSide int) int64 {
	m := int64(maxSide)
	return (16 + 64 + 4 + 1) * m * m
}

// shrink returns src reduced by the largest integer factor k that keeps its longer side at
// least maxSide: each pixel is the mean of a k×k block of src (of the part of the block
// inside src, at the right and bottom edges), premultiplied, 8 bits per channel. Scaling
// the result needs scratch memory in proportion to the variant, not to src (draw's kernel
// scalers hold dst width × src height × 32 bytes); the result itself is smaller than
// (2·maxSide)² × 4 bytes. A k below 2 returns src itself.
func shrink(src image.Image, maxSide int) image.Image {
	sb := src.Bounds()
	sw, sh := sb.Dx(), sb.Dy()
	k := max(sw, sh) / maxSide
	if k < 2 {
		return src
	}
	at := rgba64At(src)
	w, h := (sw+k-1)/k, (sh+k-1)/k
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	sums := make([]uint64, 4*w) // the sums of the block row being read
	for y := range sh {
		for x := range sw {
			c := at(sb.Min.X+x, sb.Min.Y+y)
			s := sums[4*(x/k) : 4*(x/k)+4]
			s[0] += uint64(c.R)
			s[1] += uint64(c.G)
			s[2] += uint64(c.B)
			s[3] += uint64(c.A)
		}
		if (y+1)%k != 0 && y != sh-1 {
			continue
		}
		rows := y%k + 1
		row := dst.Pix[(y/k)*dst.Stride:]
		for i := range w {
			n := uint64(rows * min(k, sw-i*k))
			for c := range 4 {
				row[4*i+c] = uint8(sums[4*i+c] / n >> 8)
				sums[4*i+c] = 0
			}
		}
	}
	return dst
}

// rgba64At returns the premultiplied 16-bit color function of img, without allocating
// when img has one.
func rgba64At(img image.Image) func(x, y int) color.RGBA64 {
	if m, ok := img.(image.RGBA64Image); ok {
		return m.RGBA64At
	}
	return func(x, y int) color.RGBA64 {
		r, g, b, a := img.At(x, y).RGBA()
		return color.RGBA64{R: uint16(r), G: uint16(g), B: uint16(b), A: uint16(a)}
	}
}
