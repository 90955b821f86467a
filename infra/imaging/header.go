package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/listingkit/listing/domain"
)

// Header is what an image's header tells before any pixel is decoded.
type Header struct {
	ContentType string // sniffed from the content, one of domain.AllowedMediaTypes
	Width       int
	Height      int
	// DecodeBytes is the memory the decoder of ContentType allocates to decode the pixels:
	// the decoded image in the decoder's own layout, plus the working buffers as large as the
	// image that the decoder holds at the same time. See DecodeBytes for each type.
	DecodeBytes int64
}

// ReadHeader sniffs data and reads its header without decoding any pixel. It returns
// ErrUnsupportedType for a type outside domain.AllowedMediaTypes, ErrCorrupt for a header
// that does not decode or has a zero dimension, and ErrTooManyPixels when Width×Height
// exceeds MaxPixels; these errors are not wrapped with an operation name. The memory it
// states is computed as follows, for the decoders this package uses:
//
//   - JPEG: per component, one byte per sample of the image padded to whole MCUs (its
//     sampling factors read from the frame header, so 4:2:0 chroma counts a quarter);
//     a 4-component (CMYK) image adds 4 bytes per pixel for its conversion. A progressive
//     JPEG adds 4 bytes per sample: its decoder keeps every 8×8 block's coefficients
//     (int32) until the last scan, so it costs five times a baseline JPEG.
//   - PNG: the bytes per pixel of the image type the decoder returns: gray 1, gray with a
//     tRNS chunk or gray+alpha or RGB or RGBA 4, palette 1; twice that for a bit depth of
//     16; doubled again when interlaced (each Adam7 pass is decoded into an image of its
//     own before it is merged).
//   - GIF: 1 byte per pixel of the logical screen (the first frame is decoded).
//   - WebP: 10 bytes per pixel, the most the decoder holds (lossless: the ARGB pixels and
//     a transformed copy; lossy: YCbCr 4:2:0 and a lossless alpha plane).
func ReadHeader(data []byte) (Header, error) {
	if len(data) == 0 {
		return Header{}, ErrUnsupportedType.WithMessage("the media is empty")
	}
	ct := sniff(data)
	c, ok := codecs[ct]
	if !ok || !slices.Contains(domain.AllowedMediaTypes, ct) {
		return Header{}, ErrUnsupportedType.WithCause(fmt.Errorf("sniffed %s", ct))
	}
	cfg, err := c.config(bytes.NewReader(data))
	if err != nil {
		return Header{}, ErrCorrupt.WithCause(fmt.Errorf("%s header: %w", ct, err))
	}
	w, h := cfg.Width, cfg.Height
	if w <= 0 || h <= 0 {
		return Header{}, ErrCorrupt.WithCause(fmt.Errorf("%s header: %dx%d", ct, w, h))
	}
	if int64(w)*int64(h) > MaxPixels {
		return Header{}, ErrTooManyPixels.WithMessage("the image is %dx%d pixels; at most %d pixels are allowed",
			w, h, MaxPixels)
	}
	pixels := int64(w) * int64(h)
	var n int64
	switch ct {
	case "image/jpeg":
		n, err = jpegDecodeBytes(data, w, h)
	case "image/png":
		n, err = pngDecodeBytes(data, pixels)
	case "image/gif":
		n = pixels
	case "image/webp":
		n = 10 * pixels
	}
	if err != nil {
		return Header{}, ErrCorrupt.WithCause(fmt.Errorf("%s header: %w", ct, err))
	}
	return Header{ContentType: ct, Width: w, Height: h, DecodeBytes: n}, nil
}

// jpegDecodeBytes finds the frame header (SOFn) of a JPEG whose dimensions are w×h and
// returns what image/jpeg allocates to decode it.
func jpegDecodeBytes(data []byte, w, h int) (int64, error) {
	i := 2 // after SOI
	for {
		// Markers may be preceded by junk (image/jpeg skips it) and by fill bytes 0xFF.
		for i < len(data) && data[i] != 0xFF {
			i++
		}
		for i+1 < len(data) && data[i+1] == 0xFF {
			i++
		}
		if i+1 >= len(data) {
			return 0, errors.New("no frame header")
		}
		marker := data[i+1]
		i += 2
		if marker == 0x01 || marker >= 0xD0 && marker <= 0xD8 {
			continue // TEM, RSTn, SOI: no length
		}
		if i+2 > len(data) {
			return 0, errors.New("truncated segment")
		}
		n := int(binary.BigEndian.Uint16(data[i:]))
		if n < 2 || i+n > len(data) {
			return 0, errors.New("truncated segment")
		}
		if marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC {
			return jpegFrameBytes(data[i+2:i+n], marker == 0xC2, w, h)
		}
		i += n
	}
}

// jpegFrameBytes computes the decoder's allocations from a frame header's payload.
func jpegFrameBytes(sof []byte, progressive bool, w, h int) (int64, error) {
	if len(sof) < 6 {
		return 0, errors.New("short frame header")
	}
	nc := int(sof[5])
	if nc != 1 && nc != 3 && nc != 4 || len(sof) < 6+3*nc {
		return 0, fmt.Errorf("frame header with %d components", nc)
	}
	hs, vs := make([]int64, nc), make([]int64, nc)
	for c := range nc {
		hs[c], vs[c] = int64(sof[6+3*c+1]>>4), int64(sof[6+3*c+1]&0x0F)
		if hs[c] == 0 || vs[c] == 0 {
			return 0, errors.New("zero sampling factor")
		}
	}
	if nc == 1 {
		hs[0], vs[0] = 1, 1 // a single component is not interleaved, whatever it declares
	}
	// MCUs across and down, as image/jpeg counts them (from the first component).
	mxx := (int64(w) + 8*hs[0] - 1) / (8 * hs[0])
	myy := (int64(h) + 8*vs[0] - 1) / (8 * vs[0])
	var samples int64
	for c := range nc {
		samples += 64 * mxx * hs[c] * myy * vs[c]
	}
	n := samples
	if nc == 4 {
		n += 4 * int64(w) * int64(h)
	}
	if progressive {
		n += 4 * samples
	}
	return n, nil
}

// pngDecodeBytes reads the IHDR of a PNG (image/png validated it) and the chunks before
// the first IDAT (for tRNS), and returns what image/png allocates to decode pixels pixels.
func pngDecodeBytes(data []byte, pixels int64) (int64, error) {
	if len(data) < 33 || string(data[12:16]) != "IHDR" {
		return 0, errors.New("no IHDR")
	}
	depth, colorType, interlaced := data[24], data[25], data[28] == 1
	transparent := false
	for off := 33; off+8 <= len(data); {
		typ := string(data[off+4 : off+8])
		if typ == "IDAT" {
			break
		}
		if typ == "tRNS" {
			transparent = true
		}
		off += 12 + int(binary.BigEndian.Uint32(data[off:]))
	}
	var perPixel int64
	switch colorType {
	case 0: // gray: Gray, or NRGBA with tRNS
		perPixel = 1
		if transparent {
			perPixel = 4
		}
	case 3: // palette: Paletted
		perPixel = 1
	default: // RGB, gray+alpha, RGBA: RGBA or NRGBA
		perPixel = 4
	}
	if depth == 16 {
		perPixel *= 2
	}
	n := perPixel * pixels
	if interlaced {
		n *= 2
	}
	return n, nil
}
