package imaging_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"runtime"
	"testing"

	"github.com/listingkit/listing/infra/imaging"
	"github.com/listingkit/listing/internal/imagebomb"
)

// pngIHDR is a PNG signature and an IHDR chunk of the given depth, color type and
// interlace method, then the chunks named in extra (empty payloads), and nothing else.
func pngIHDR(w, h uint32, depth, colorType, interlace byte, extra ...string) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(data)))
		body := append([]byte(typ), data...)
		b.Write(body)
		_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(body))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	chunk("IHDR", append(ihdr, depth, colorType, 0, 0, interlace))
	for _, typ := range extra {
		payload := []byte{}
		if typ == "PLTE" {
			payload = make([]byte, 3*256)
		}
		chunk(typ, payload)
	}
	return b.Bytes()
}

// jpegFrame is SOI, a frame header (marker sof: 0xC0 baseline, 0xC2 progressive) claiming
// w×h with the given sampling factors (one byte HV per component), and an SOS marker.
func jpegFrame(sof byte, w, h uint16, sampling ...byte) []byte {
	b := []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 'x', 'y', 0xFF, sof} // SOI, an APP0 to skip, SOFn
	b = binary.BigEndian.AppendUint16(b, uint16(8+3*len(sampling)))
	b = append(b, 8)
	b = binary.BigEndian.AppendUint16(b, h)
	b = binary.BigEndian.AppendUint16(b, w)
	b = append(b, byte(len(sampling)))
	for i, hv := range sampling {
		b = append(b, byte(i+1), hv, 0)
	}
	return append(b, 0xFF, 0xDA, 0x00, 0x08)
}

func TestReadHeaderDecodeBytes(t *testing.T) {
	const w, h = 1000, 600
	const px = w * h
	cases := []struct {
		name string
		data []byte
		want int64
	}{
		{"png gray 8", pngIHDR(w, h, 8, 0, 0), px},
		{"png gray 8 with tRNS", pngIHDR(w, h, 8, 0, 0, "tRNS"), 4 * px},
		{"png gray 16", pngIHDR(w, h, 16, 0, 0), 2 * px},
		{"png gray 16 with tRNS", pngIHDR(w, h, 16, 0, 0, "tRNS"), 8 * px},
		{"png rgb 8", pngIHDR(w, h, 8, 2, 0), 4 * px},
		{"png rgb 16", pngIHDR(w, h, 16, 2, 0), 8 * px},
		{"png palette", pngIHDR(w, h, 8, 3, 0, "PLTE", "IDAT"), px},
		{"png gray+alpha 16", pngIHDR(w, h, 16, 4, 0), 8 * px},
		{"png rgba 8", pngIHDR(w, h, 8, 6, 0), 4 * px},
		{"png rgba 16", pngIHDR(w, h, 16, 6, 0), 8 * px},
		{"png rgba 16 interlaced", pngIHDR(w, h, 16, 6, 1), 16 * px},
		{"png tRNS after IDAT is not seen", pngIHDR(w, h, 8, 0, 0, "IDAT", "tRNS"), px},
		// 4:2:0 in 16×16 MCUs: 63×38 of them; Y 4 blocks, Cb and Cr 1 block each per MCU.
		{"jpeg baseline 4:2:0", jpegFrame(0xC0, w, h, 0x22, 0x11, 0x11), 63 * 38 * 6 * 64},
		{"jpeg progressive 4:2:0", jpegFrame(0xC2, w, h, 0x22, 0x11, 0x11), 5 * 63 * 38 * 6 * 64},
		// 4:4:4 in 8×8 MCUs: 125×75 of them.
		{"jpeg baseline 4:4:4", jpegFrame(0xC0, w, h, 0x11, 0x11, 0x11), 125 * 75 * 3 * 64},
		{"jpeg progressive 4:4:4", jpegFrame(0xC2, w, h, 0x11, 0x11, 0x11), 5 * 125 * 75 * 3 * 64},
		{"jpeg gray ignores its sampling factors", jpegFrame(0xC0, w, h, 0x22), 125 * 75 * 64},
		{"jpeg cmyk adds its conversion", jpegFrame(0xC0, w, h, 0x11, 0x11, 0x11, 0x11), 125*75*4*64 + 4*px},
		{"gif", gifHeader(w, h), px},
		{"webp", b64(t, webpLossless), 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hd, err := imaging.ReadHeader(c.data)
			if err != nil {
				t.Fatal(err)
			}
			if hd.DecodeBytes != c.want {
				t.Fatalf("DecodeBytes = %d, want %d", hd.DecodeBytes, c.want)
			}
		})
	}
}

// TestReadHeaderRefusesBombsFromTheHeaderAlone: files far smaller than what they declare
// are refused before any pixel is decoded; were the pixels decoded, the truncated PNG
// would be ErrCorrupt after allocating 400 MB.
func TestReadHeaderRefusesBombsFromTheHeaderAlone(t *testing.T) {
	const side = 7071 // 49,999,041 pixels: under MaxPixels
	cases := map[string]struct {
		data []byte
		want int64
	}{
		"progressive jpeg": {imagebomb.ProgressiveJPEG(side, side), 5 * 3 * 884 * 884 * 64},
		"16-bit png":       {imagebomb.PNG16(side, side), 8 * side * side},
		"truncated png":    {imagebomb.TruncatedPNG16(side, side), 8 * side * side},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			hd, err := imaging.ReadHeader(c.data)
			if err != nil {
				t.Fatal(err)
			}
			if hd.DecodeBytes != c.want || hd.Width != side || hd.Height != side {
				t.Fatalf("header = %+v, want %dx%d and DecodeBytes %d", hd, side, side, c.want)
			}
			_, err = imaging.Inspect(bytes.NewReader(c.data), imaging.Limits{MaxBytes: 1 << 20})
			wantCode(t, err, "imaging.Inspect", imaging.ErrTooLarge)
			_, err = imaging.Derive(c.data, imaging.DefaultVariants)
			wantCode(t, err, "imaging.Derive", imaging.ErrTooLarge)
		})
	}
	if n := len(imagebomb.TruncatedPNG16(side, side)); n >= 100 {
		t.Fatalf("the truncated PNG has %d bytes", n)
	}
}

func TestInspectDecodeBudget(t *testing.T) {
	data := encodePNG(t, gradient(100, 50)) // NRGBA: 20,000 bytes decoded
	if _, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: 1 << 20, MaxDecodeBytes: 20_000}); err != nil {
		t.Fatalf("exactly the budget: %v", err)
	}
	_, err := imaging.Inspect(bytes.NewReader(data), imaging.Limits{MaxBytes: 1 << 20, MaxDecodeBytes: 19_999})
	wantCode(t, err, "imaging.Inspect", imaging.ErrTooLarge)
}

// TestDecodeBytesCoverTheDecoder decodes real images and compares the heap the decoder
// allocated with DecodeBytes: never more (beyond small buffers), and not far less.
func TestDecodeBytesCoverTheDecoder(t *testing.T) {
	const w, h = 640, 480
	rgb := gradient(w, h)
	deep := image.NewNRGBA64(image.Rect(0, 0, w, h))
	gray := image.NewGray(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			deep.Set(x, y, rgb.At(x, y))
			gray.Set(x, y, color.Gray{Y: uint8(x ^ y)})
		}
	}
	var enc16 bytes.Buffer
	if err := png.Encode(&enc16, deep); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"png nrgba":              encodePNG(t, rgb),
		"png gray":               encodePNG(t, gray),
		"png 16-bit":             enc16.Bytes(),
		"jpeg baseline 4:2:0":    encodeJPEG(t, rgb),
		"jpeg gray":              encodeJPEG(t, gray),
		"jpeg progressive 4:4:4": imagebomb.ProgressiveJPEG(w, h),
		"gif":                    encodeGIF(t, rgb),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			hd, err := imaging.ReadHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := imaging.Derive(data, nil); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			allocated := int64(after.TotalAlloc - before.TotalAlloc)
			t.Logf("DecodeBytes %d, allocated %d", hd.DecodeBytes, allocated)
			if allocated > hd.DecodeBytes+256<<10 || allocated < hd.DecodeBytes/2 {
				t.Fatalf("decoding allocated %d bytes; DecodeBytes says %d", allocated, hd.DecodeBytes)
			}
		})
	}
}

// TestDeriveMemoryDoesNotGrowWithTheSource: beyond the decoded image, deriving a 256-pixel
// variant of a 1200×1200 image allocates less than DeriveWorkBytes(256), a bound for any
// source (draw's scaler alone would hold 256 × 1200 × 32 bytes, 9.4 MiB).
func TestDeriveMemoryDoesNotGrowWithTheSource(t *testing.T) {
	const side = 1200
	src := image.NewGray(image.Rect(0, 0, side, side))
	for i := range src.Pix {
		src.Pix[i] = uint8(i % 251)
	}
	im, err := imaging.Inspect(bytes.NewReader(encodePNG(t, src)), imaging.Limits{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := im.Derive([]imaging.VariantSpec{{Name: "thumb", MaxSide: 256}}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("derived with %d bytes", allocated)
	if bound := imaging.DeriveWorkBytes(256); allocated > bound {
		t.Fatalf("Derive allocated %d bytes, more than DeriveWorkBytes(256) = %d", allocated, bound)
	}
}
