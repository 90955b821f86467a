// Package imagebomb writes small files that declare large images (decompression bombs),
// for tests of the media flow's memory bounds. Every file is valid: decoded in full, it
// gives an image of the size its header states.
package imagebomb

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
)

// ProgressiveJPEG returns a progressive, 3-component 4:4:4 JPEG of w×h mid-gray pixels in a
// few hundred bytes: one AC scan per component whose blocks are all covered by end-of-band
// runs (EOB0..EOB14, at most 32,767 blocks per symbol), and no DC scan (every coefficient
// is zero). image/jpeg holds a coefficient block for every 8×8 block of every component
// until the last scan, then the whole image: 15 bytes per pixel.
func ProgressiveJPEG(w, h int) []byte {
	var b bytes.Buffer
	segment := func(marker byte, payload []byte) {
		b.Write([]byte{0xFF, marker})
		_ = binary.Write(&b, binary.BigEndian, uint16(len(payload)+2))
		b.Write(payload)
	}
	b.Write([]byte{0xFF, 0xD8})                                      // SOI
	segment(0xDB, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...)) // DQT 0: all ones
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3}
	for c := byte(1); c <= 3; c++ {
		sof = append(sof, c, 0x11, 0) // 1×1 sampling, quantization table 0
	}
	segment(0xC2, sof) // SOF2: progressive
	// AC table 0: fifteen 4-bit codes, the code of EOBn being n.
	dht := []byte{0x10, 0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for n := byte(0); n <= 14; n++ {
		dht = append(dht, n<<4) // EOBn: a run of 2^n + (n extra bits) blocks
	}
	segment(0xC4, dht)
	blocks := ((w + 7) / 8) * ((h + 7) / 8)
	for c := byte(1); c <= 3; c++ {
		segment(0xDA, []byte{1, c, 0x00, 1, 63, 0}) // SOS: component c, AC 1..63
		var bits bitWriter
		for left := blocks; left > 0; {
			run := min(left, 1<<15-1)
			n := 0
			for 1<<(n+1) <= run {
				n++
			}
			bits.write(uint32(n), 4)
			bits.write(uint32(run-1<<n), n)
			left -= run
		}
		b.Write(bits.flush())
	}
	b.Write([]byte{0xFF, 0xD9}) // EOI
	return b.Bytes()
}

// BaselineJPEG returns a baseline 4:2:0 JPEG of w×h mid-gray pixels in about w×h/85
// bytes: every 8×8 block is a zero DC difference and an end of block, one bit each.
// image/jpeg decodes it into an *image.YCbCr of 1.5 bytes per pixel.
func BaselineJPEG(w, h int) []byte {
	var b bytes.Buffer
	segment := func(marker byte, payload []byte) {
		b.Write([]byte{0xFF, marker})
		_ = binary.Write(&b, binary.BigEndian, uint16(len(payload)+2))
		b.Write(payload)
	}
	b.Write([]byte{0xFF, 0xD8})                                      // SOI
	segment(0xDB, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...)) // DQT 0: all ones
	segment(0xC0, []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3,
		1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0}) // SOF0: Y 2×2, Cb and Cr 1×1
	oneCode := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // a single 1-bit code
	segment(0xC4, append(append([]byte{0x00}, oneCode...), 0x00))     // DC table 0: category 0
	segment(0xC4, append(append([]byte{0x10}, oneCode...), 0x00))     // AC table 0: end of block
	segment(0xDA, []byte{3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0})     // SOS: all three, sequential
	mcus := ((w + 15) / 16) * ((h + 15) / 16)
	var bits bitWriter
	for range 6 * mcus { // 4 Y blocks, 1 Cb, 1 Cr
		bits.write(0, 2) // DC difference 0, then end of block
	}
	b.Write(bits.flush())
	b.Write([]byte{0xFF, 0xD9}) // EOI
	return b.Bytes()
}

// bitWriter writes JPEG entropy-coded bits, most significant first, with 0xFF byte stuffing.
type bitWriter struct {
	out   []byte
	acc   uint64
	nbits int
}

func (w *bitWriter) write(v uint32, n int) {
	w.acc = w.acc<<n | uint64(v)&(1<<n-1)
	w.nbits += n
	for w.nbits >= 8 {
		c := byte(w.acc >> (w.nbits - 8))
		w.out = append(w.out, c)
		if c == 0xFF {
			w.out = append(w.out, 0)
		}
		w.nbits -= 8
	}
}

// flush pads the last byte with one bits and returns the bytes.
func (w *bitWriter) flush() []byte {
	if w.nbits > 0 {
		w.write(1<<(8-w.nbits)-1, 8-w.nbits)
	}
	return w.out
}

// PNG16 returns a 16-bit RGBA PNG of w×h transparent black pixels (image/png decodes it to
// an *image.NRGBA64: 8 bytes per pixel) in about w×h/125 bytes.
func PNG16(w, h int) []byte {
	b := pngIHDR(w, h)
	chunk(b, "IDAT", zlibZeros(h*(1+8*w))) // each row: filter byte 0, then zeros
	chunk(b, "IEND", nil)
	return b.Bytes()
}

// TruncatedPNG16 returns the first 33 bytes of PNG16(w, h): the signature and the IHDR
// chunk, no pixel data.
func TruncatedPNG16(w, h int) []byte { return pngIHDR(w, h).Bytes() }

func pngIHDR(w, h int) *bytes.Buffer {
	b := bytes.NewBufferString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 16, 6 // bit depth 16, color type 6 (RGBA)
	chunk(b, "IHDR", ihdr)
	return b
}

func chunk(b *bytes.Buffer, typ string, data []byte) {
	_ = binary.Write(b, binary.BigEndian, uint32(len(data)))
	b.WriteString(typ)
	b.Write(data)
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	_ = binary.Write(b, binary.BigEndian, crc.Sum32())
}

// zlibZeros returns a zlib stream of n zero bytes without compressing n bytes (slow under
// -race): the blocks of one compressed MiB, flushed to a byte boundary, decode to a MiB of
// zeros wherever they stand, so they are repeated; a final block holds the rest.
func zlibZeros(n int) []byte {
	const chunk = 1 << 20
	var one bytes.Buffer
	fw, _ := flate.NewWriter(&one, flate.BestCompression)
	_, _ = fw.Write(make([]byte, chunk))
	_ = fw.Flush()
	out := bytes.NewBuffer([]byte{0x78, 0xDA})
	for range n / chunk {
		out.Write(one.Bytes())
	}
	fw, _ = flate.NewWriter(out, flate.BestCompression)
	_, _ = fw.Write(make([]byte, n%chunk))
	_ = fw.Close()
	// Adler-32 of n zeros: a stays 1, b counts the bytes.
	_ = binary.Write(out, binary.BigEndian, uint32(n%65521)<<16|1)
	return out.Bytes()
}
