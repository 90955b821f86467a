package imaging_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/imaging"
)

// Minimal WebP files (the WebP project's feature-detection images), 1x1 each.
const (
	webpLossless = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="                                                                 // VP8L, transparent
	webpLossy    = "UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA"                                                         // VP8
	webpAlpha    = "UklGRkoAAABXRUJQVlA4WAoAAAAQAAAAAAAAAAAAQUxQSAwAAAARBxAR/Q9ERP8DAABWUDggGAAAABQBAJ0BKgEAAQAAAP4AAA3AAP7mtQAAAA==" // VP8X + ALPH + VP8
)

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gradient is a w×h opaque image with some structure, so that encoders have work to do.
func gradient(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		row := img.Pix[y*img.Stride:]
		for x := range w {
			copy(row[4*x:], []byte{uint8(x * 255 / max(w-1, 1)), uint8(y * 255 / max(h-1, 1)), uint8((x ^ y) & 0xff), 255})
		}
	}
	return img
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeJPEG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeGIF(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := gif.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pngHeader is a PNG signature and a valid IHDR chunk (8-bit RGB) claiming w×h, and nothing else.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 0, 17)
	ihdr = append(ihdr, "IHDR"...)
	ihdr = binary.BigEndian.AppendUint32(ihdr, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0) // bit depth, color type RGB, compression, filter, interlace
	_ = binary.Write(&b, binary.BigEndian, uint32(len(ihdr)-4))
	b.Write(ihdr)
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(ihdr))
	return b.Bytes()
}

// gifHeader is a GIF89a header and logical screen descriptor claiming w×h.
func gifHeader(w, h uint16) []byte {
	b := []byte("GIF89a")
	b = binary.LittleEndian.AppendUint16(b, w)
	b = binary.LittleEndian.AppendUint16(b, h)
	return append(b, 0, 0, 0, ';')
}

// jpegHeader is SOI, a baseline SOF0 segment claiming w×h (3 components) and an SOS marker.
func jpegHeader(w, h uint16) []byte {
	b := []byte{0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08}
	b = binary.BigEndian.AppendUint16(b, h)
	b = binary.BigEndian.AppendUint16(b, w)
	b = append(b, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1)
	return append(b, 0xFF, 0xDA, 0x00, 0x0C) // SOS: DecodeConfig stops there

}

// wantCode asserts err is a *domain.Error with code and kind, wrapped with op.
func wantCode(t *testing.T, err error, op string, want *domain.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %s", want.Code)
	}
	var de *domain.Error
	if !errors.As(err, &de) {
		t.Fatalf("err = %v (%T), want a *domain.Error", err, err)
	}
	if de.Code != want.Code || de.Kind != want.Kind || !errors.Is(err, want) {
		t.Fatalf("err = %v (kind %d), want code %s kind %d", err, de.Kind, want.Code, want.Kind)
	}
	if !strings.HasPrefix(err.Error(), op+": ") {
		t.Fatalf("err = %q, want it wrapped with %q", err, op)
	}
}

func TestInspectRoundTrip(t *testing.T) {
	src := gradient(40, 30)
	cases := []struct {
		name, ct string
		data     []byte
		w, h     int
	}{
		{"png", "image/png", encodePNG(t, src), 40, 30},
		{"jpeg", "image/jpeg", encodeJPEG(t, src), 40, 30},
		{"gif", "image/gif", encodeGIF(t, src), 40, 30},
		{"webp lossless", "image/webp", b64(t, webpLossless), 1, 1},
		{"webp lossy", "image/webp", b64(t, webpLossy), 1, 1},
		{"webp alpha", "image/webp", b64(t, webpAlpha), 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			im, err := imaging.Inspect(bytes.NewReader(c.data), imaging.Limits{MaxBytes: int64(len(c.data))})
			if err != nil {
				t.Fatal(err)
			}
			info, got := im.Info, im.Data
			want := imaging.Info{ContentType: c.ct, Width: c.w, Height: c.h, Size: int64(len(c.data))}
			if info != want {
				t.Fatalf("info = %+v, want %+v", info, want)
			}
			if !bytes.Equal(got, c.data) {
				t.Fatal("returned bytes differ from the input")
			}
			d, err := im.Derive(imaging.DefaultVariants)
			if err != nil {
				t.Fatal(err)
			}
			again, err := imaging.Derive(got, imaging.DefaultVariants)
			if err != nil || !equalDerived(d, again) {
				t.Fatalf("Derive of the bytes differs from Derive of the inspected image (err %v)", err)
			}
			if len(d) != len(imaging.DefaultVariants) {
				t.Fatalf("got %d variants, want %d", len(d), len(imaging.DefaultVariants))
			}
			for i, v := range d {
				if v.Variant.Name != imaging.DefaultVariants[i].Name || v.Variant.Width != c.w || v.Variant.Height != c.h {
					t.Fatalf("variant %d = %+v, want %s %dx%d", i, v.Variant, imaging.DefaultVariants[i].Name, c.w, c.h)
				}
				checkJPEG(t, v, c.w, c.h)
			}
		})
	}
}

// checkJPEG asserts a derived variant is a JPEG of the size it claims.
func checkJPEG(t *testing.T, d imaging.Derived, w, h int) image.Image {
	t.Helper()
	if d.Variant.Size != int64(len(d.Bytes)) {
		t.Fatalf("%s: Size = %d, len(Bytes) = %d", d.Variant.Name, d.Variant.Size, len(d.Bytes))
	}
	img, err := jpeg.Decode(bytes.NewReader(d.Bytes))
	if err != nil {
		t.Fatalf("%s: not a JPEG: %v", d.Variant.Name, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h || d.Variant.Width != w || d.Variant.Height != h {
		t.Fatalf("%s: JPEG is %v, variant says %dx%d, want %dx%d", d.Variant.Name, b, d.Variant.Width, d.Variant.Height, w, h)
	}
	return img
}

func TestInspectSizeLimit(t *testing.T) {
	data := encodePNG(t, gradient(16, 16))
	n := int64(len(data))
	if _, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: n}); err != nil {
		t.Fatalf("exactly maxBytes: %v", err)
	}
	got, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: n - 1})
	wantCode(t, err, "imaging.Inspect", imaging.ErrTooLarge)
	if !errors.Is(err, domain.ErrMediaTooLarge) {
		t.Fatalf("err = %v, want it to match domain.ErrMediaTooLarge", err)
	}
	if got != nil {
		t.Fatal("an image returned with an error")
	}

	// An endless stream: Inspect reads maxBytes+1 bytes and stops.
	cr := &countingReader{r: io.MultiReader(bytes.NewReader(data), zeroes{})}
	_, err = imaging.Inspect(cr, imaging.Limits{MaxBytes: 1000})
	wantCode(t, err, "imaging.Inspect", imaging.ErrTooLarge)
	if cr.n != 1001 {
		t.Fatalf("read %d bytes, want 1001", cr.n)
	}
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestInspectBadArguments(t *testing.T) {
	if _, err := imaging.Inspect(strings.NewReader("x"), imaging.Limits{}); err == nil {
		t.Fatal("MaxBytes 0 accepted")
	}
	if _, err := imaging.Inspect(strings.NewReader("x"), imaging.Limits{MaxBytes: 10, MaxDecodeBytes: -1}); err == nil {
		t.Fatal("negative MaxDecodeBytes accepted")
	}
	readErr := errors.New("connection reset")
	_, err := imaging.Inspect(io.MultiReader(strings.NewReader("GIF89a"), &failingReader{readErr}), imaging.Limits{MaxBytes: 1 << 20})
	if !errors.Is(err, readErr) || !strings.HasPrefix(err.Error(), "imaging.Inspect: ") {
		t.Fatalf("err = %v, want the read error wrapped", err)
	}
	var de *domain.Error
	if errors.As(err, &de) {
		t.Fatalf("a read failure became %v", de)
	}
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestInspectUnsupportedType(t *testing.T) {
	var bmp bytes.Buffer
	bmp.WriteString("BM")
	bmp.Write(make([]byte, 60))
	cases := map[string][]byte{
		"pdf":   []byte("%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n"),
		"html":  []byte("<!DOCTYPE html><html><body><img src=x onerror=alert(1)></body></html>"),
		"text":  []byte("just some text, not an image"),
		"svg":   []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>`),
		"bmp":   bmp.Bytes(),
		"empty": {},
		"riff":  []byte("RIFF\x24\x00\x00\x00WAVEfmt "), // RIFF but not WEBP
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: 1 << 20})
			wantCode(t, err, "imaging.Inspect", imaging.ErrUnsupportedType)
			if !errors.Is(err, domain.ErrMediaTypeUnsupported) {
				t.Fatalf("err = %v, want it to match domain.ErrMediaTypeUnsupported", err)
			}
			_, err = imaging.Derive(data, imaging.DefaultVariants)
			wantCode(t, err, "imaging.Derive", imaging.ErrUnsupportedType)
		})
	}
}

func TestInspectCorrupt(t *testing.T) {
	pngData := encodePNG(t, gradient(64, 64))
	jpegData := encodeJPEG(t, gradient(64, 64))
	gifData := encodeGIF(t, gradient(64, 64))
	webpData := b64(t, webpLossy)
	cases := map[string][]byte{
		"png truncated":      pngData[:len(pngData)/2],
		"png header only":    pngData[:8],
		"png zero width":     pngHeader(0, 10),
		"png bad crc":        append(pngHeader(10, 10)[:len(pngHeader(10, 10))-1], 0),
		"jpeg truncated":     jpegData[:len(jpegData)/2],
		"jpeg header only":   jpegData[:4],
		"gif truncated":      gifData[:len(gifData)/2],
		"gif header only":    gifHeader(10, 10),
		"webp truncated":     webpData[:len(webpData)-6],
		"webp magic only":    []byte("RIFF\x04\x00\x00\x00WEBP"),
		"png flipped pixels": flipIDAT(t, pngData),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: 1 << 20})
			wantCode(t, err, "imaging.Inspect", imaging.ErrCorrupt)
			_, err = imaging.Derive(data, imaging.DefaultVariants)
			wantCode(t, err, "imaging.Derive", imaging.ErrCorrupt)
		})
	}
}

// flipIDAT corrupts a byte inside the first IDAT chunk's compressed data (the CRC check fails).
func flipIDAT(t *testing.T, data []byte) []byte {
	t.Helper()
	i := bytes.Index(data, []byte("IDAT"))
	if i < 0 {
		t.Fatal("no IDAT")
	}
	out := bytes.Clone(data)
	out[i+10] ^= 0xFF
	return out
}

func TestInspectPixelBomb(t *testing.T) {
	cases := map[string][]byte{
		"png 100000x100000": pngHeader(100000, 100000),
		"png 50M+1 pixels":  pngHeader(50_000_001, 1),
		"gif 65535x65535":   gifHeader(65535, 65535),
		"jpeg 65535x65535":  jpegHeader(65535, 65535),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			// Were the pixels decoded, the PNG and GIF headers would be corrupt (no data
			// follows) and the allocation enormous: the pixel count must be refused first.
			_, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: 1 << 20})
			wantCode(t, err, "imaging.Inspect", imaging.ErrTooManyPixels)
			_, err = imaging.Derive(data, imaging.DefaultVariants)
			wantCode(t, err, "imaging.Derive", imaging.ErrTooManyPixels)
		})
	}
	// At the limit exactly, the pixel count is accepted and the decode budget decides:
	// 50 megapixels of RGB take 200 MB.
	_, err := imaging.Inspect(bytes.NewReader(pngHeader(imaging.MaxPixels, 1)), imaging.Limits{MaxBytes: 1 << 20})
	wantCode(t, err, "imaging.Inspect", imaging.ErrTooLarge)
}

func TestDeriveScalesDownPreservingAspect(t *testing.T) {
	data := encodePNG(t, gradient(1100, 550))
	d, err := imaging.Derive(data, []imaging.VariantSpec{{"thumb", 256}, {"medium", 1024}, {"huge", 4096}, {"tiny", 3}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{256, 128}, {1024, 512}, {1100, 550}, {3, 2}}
	for i, v := range d {
		checkJPEG(t, v, want[i][0], want[i][1])
	}
	// Portrait, and an extreme ratio whose short side rounds to zero.
	d, err = imaging.Derive(encodePNG(t, gradient(300, 1200)), []imaging.VariantSpec{{"thumb", 256}, {"dot", 2}})
	if err != nil {
		t.Fatal(err)
	}
	checkJPEG(t, d[0], 64, 256)
	checkJPEG(t, d[1], 1, 2)
}

func TestDeriveNeverUpscales(t *testing.T) {
	data := encodeJPEG(t, gradient(100, 50))
	d, err := imaging.Derive(data, imaging.DefaultVariants)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d {
		checkJPEG(t, v, 100, 50)
	}
	// The longer side equal to MaxSide is kept as is.
	d, err = imaging.Derive(encodePNG(t, gradient(256, 10)), []imaging.VariantSpec{{"thumb", 256}})
	if err != nil {
		t.Fatal(err)
	}
	checkJPEG(t, d[0], 256, 10)
}

func TestDeriveFlattensAlphaOntoWhite(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 600, 300)) // fully transparent
	for y := range 300 {
		for x := range 300 { // left half opaque red
			img.SetNRGBA(x, y, color.NRGBA{R: 255, A: 255})
		}
	}
	d, err := imaging.Derive(encodePNG(t, img), []imaging.VariantSpec{{"thumb", 200}, {"same", 600}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d {
		w := v.Variant.Width
		got := checkJPEG(t, v, w, w/2)
		if !near(got.At(w*3/4, w/4), 255, 255, 255) {
			t.Fatalf("%s: transparent area = %v, want white", v.Variant.Name, got.At(w*3/4, w/4))
		}
		if !near(got.At(w/4, w/4), 255, 0, 0) {
			t.Fatalf("%s: opaque area = %v, want red", v.Variant.Name, got.At(w/4, w/4))
		}
	}
	// A transparent WebP pixel becomes white too.
	d, err = imaging.Derive(b64(t, webpAlpha), imaging.DefaultVariants[:1])
	if err != nil {
		t.Fatal(err)
	}
	if got := checkJPEG(t, d[0], 1, 1); !near(got.At(0, 0), 255, 255, 255) {
		t.Fatalf("transparent webp = %v, want white", got.At(0, 0))
	}
}

func TestDeriveGIFFrameSmallerThanScreen(t *testing.T) {
	// A GIF whose only frame covers the right half of a 20x10 logical screen.
	frame := image.NewPaletted(image.Rect(10, 0, 20, 10), color.Palette{color.Black, color.White})
	var buf bytes.Buffer
	err := gif.EncodeAll(&buf, &gif.GIF{Image: []*image.Paletted{frame}, Delay: []int{0},
		Config: image.Config{ColorModel: frame.Palette, Width: 20, Height: 10}})
	if err != nil {
		t.Fatal(err)
	}
	im, err := imaging.Inspect(&buf, imaging.Limits{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if im.Info.Width != 20 || im.Info.Height != 10 {
		t.Fatalf("info = %+v, want 20x10", im.Info)
	}
	d, err := im.Derive(imaging.DefaultVariants[:1])
	if err != nil {
		t.Fatal(err)
	}
	got := checkJPEG(t, d[0], 20, 10)
	if !near(got.At(2, 5), 255, 255, 255) || !near(got.At(17, 5), 0, 0, 0) {
		t.Fatalf("outside the frame = %v (want white), inside = %v (want black)", got.At(2, 5), got.At(17, 5))
	}
}

func near(c color.Color, r, g, b uint8) bool {
	cr, cg, cb, _ := c.RGBA()
	d := func(a uint32, b uint8) bool { x := int(a>>8) - int(b); return x > -24 && x < 24 }
	return d(cr, r) && d(cg, g) && d(cb, b)
}

func TestDeriveDeterministic(t *testing.T) {
	inputs := map[string][]byte{
		"png":  encodePNG(t, gradient(400, 300)),
		"jpeg": encodeJPEG(t, gradient(300, 400)),
		"gif":  encodeGIF(t, gradient(300, 300)),
		"webp": b64(t, webpLossy),
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			first, err := imaging.Derive(data, imaging.DefaultVariants)
			if err != nil {
				t.Fatal(err)
			}
			// Concurrent runs (under -race) give the same bytes too.
			var wg sync.WaitGroup
			results := make([][]imaging.Derived, 4)
			errs := make([]error, 4)
			for i := range results {
				wg.Go(func() { results[i], errs[i] = imaging.Derive(bytes.Clone(data), imaging.DefaultVariants) })
			}
			wg.Wait()
			for i, r := range results {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				for j := range r {
					if r[j].Variant != first[j].Variant || !bytes.Equal(r[j].Bytes, first[j].Bytes) {
						t.Fatalf("run %d variant %s differs", i, r[j].Variant.Name)
					}
				}
			}
		})
	}
}

func TestDeriveBadVariants(t *testing.T) {
	data := encodePNG(t, gradient(8, 8))
	for name, vs := range map[string][]imaging.VariantSpec{
		"no name":   {{"", 10}},
		"zero side": {{"thumb", 0}},
		"negative":  {{"thumb", -1}},
		"duplicate": {{"thumb", 10}, {"thumb", 20}},
	} {
		if _, err := imaging.Derive(data, vs); err == nil || !strings.HasPrefix(err.Error(), "imaging.Derive: ") {
			t.Fatalf("%s: err = %v, want an imaging.Derive error", name, err)
		}
	}
	d, err := imaging.Derive(data, nil)
	if err != nil || len(d) != 0 {
		t.Fatalf("no variants: %v, %v", d, err)
	}
}

func equalDerived(a, b []imaging.Derived) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Variant != b[i].Variant || !bytes.Equal(a[i].Bytes, b[i].Bytes) {
			return false
		}
	}
	return true
}
