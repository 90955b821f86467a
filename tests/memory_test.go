package tests

// Memory bounds under hostile input (issue 11): an `app all` child, built without -race
// (seedBinary), is fed a media bomb or a burst of failed logins, and the growth of its peak
// resident set (VmHWM) must stay within memGrowthBound.

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/servicetest"
)

// memGrowthBound is the largest growth of the child's peak resident set a hostile burst
// may cause: 256 MiB.
const memGrowthBound = 256 << 20

// memBombSide is the side of the square bombs: 7071² = 49,999,041 pixels, just under the
// 50-megapixel cap, so the pixel count alone does not refuse them.
const memBombSide = 7071

// TestMemoryMediaBomb uploads small images that declare near-cap canvases through the real
// media flow (describe, PUT, complete) all at once: a 407-byte progressive JPEG whose
// decoder would hold coefficients for the whole image, a ~390 KB 16-bit RGBA PNG, and a
// PNG of under 100 bytes truncated after its header. Each must end refused with
// MEDIA_TOO_LARGE (or processed), and the process's peak memory must grow by at most
// memGrowthBound.
func TestMemoryMediaBomb(t *testing.T) {
	t.Parallel()
	proc, env := memStartAll(t)
	acct := env.Register("mem-media@example.com")

	// Warm-up: a valid image goes through every code path of the flow once.
	warm := memUpload(t, env, acct, "warm.png", "image/png", memSmallPNG(t))
	require.Equal(t, "succeeded", memWait(t, env, acct, warm)["status"])

	bombs := []struct {
		name, contentType string
		data              []byte
	}{
		{"progressive.jpg", "image/jpeg", memProgressiveJPEG(memBombSide, memBombSide)},
		{"deep.png", "image/png", memPNG16(memBombSide, memBombSide, true)},
		{"truncated.png", "image/png", memPNG16(memBombSide, memBombSide, false)},
	}
	require.Less(t, len(bombs[0].data), 1<<10)
	require.Less(t, len(bombs[1].data), 1<<20)
	require.Less(t, len(bombs[2].data), 100)

	before := memPeak(t, proc)
	ops := make([]string, len(bombs))
	for i, b := range bombs {
		ops[i] = memUpload(t, env, acct, b.name, b.contentType, b.data)
	}
	results := make([]map[string]any, len(bombs))
	for i := range bombs {
		results[i] = memWait(t, env, acct, ops[i])
	}
	after := memPeak(t, proc)
	growth := after - before
	t.Logf("VmHWM %d MiB before the bombs, %d MiB after: growth %d MiB (bound %d MiB)",
		before>>20, after>>20, growth>>20, memGrowthBound>>20)
	for i, b := range bombs {
		t.Logf("%s (%d bytes): %s %v", b.name, len(b.data), results[i]["status"], results[i]["error"])
	}
	require.LessOrEqual(t, growth, int64(memGrowthBound), "peak memory grew by %d MiB", growth>>20)
	for i, b := range bombs {
		if results[i]["status"] == "failed" {
			require.Equal(t, "MEDIA_TOO_LARGE", results[i]["error"].(map[string]any)["code"], b.name)
		}
	}
	require.Equal(t, "failed", results[2]["status"], "the truncated PNG is refused from its header")
}

// TestMemoryConcurrentFailedLogins sends 20 logins with a wrong password from one address
// at once. Each would hash with argon2id (64 MiB); the process's peak memory must grow by
// at most memGrowthBound. Every answer is 401 INVALID_CREDENTIALS, or 503 SERVICE_BUSY
// (problem+json with Retry-After) for those that found no free hashing slot in time.
func TestMemoryConcurrentFailedLogins(t *testing.T) {
	t.Parallel()
	proc, env := memStartAll(t)
	acct := env.Register("mem-login@example.com")

	before := memPeak(t, proc)
	const n = 20
	body := []byte(`{"email":"` + acct.Email + `","password":"not the password at all"}`)
	out := seedBurst(t, env.URL, "POST", "/v1/auth/login", "", body, n, func(int) map[string]string { return nil })
	after := memPeak(t, proc)
	growth := after - before

	counts := map[string]int{}
	for _, r := range out {
		counts[strconv.Itoa(r.Status)+" "+r.Code()]++
	}
	t.Logf("VmHWM %d MiB before %d concurrent failed logins, %d MiB after: growth %d MiB (bound %d MiB); answers %v",
		before>>20, n, after>>20, growth>>20, memGrowthBound>>20, counts)
	require.LessOrEqual(t, growth, int64(memGrowthBound), "peak memory grew by %d MiB", growth>>20)
	for _, r := range out {
		switch r.Status {
		case http.StatusUnauthorized:
			require.Equal(t, "INVALID_CREDENTIALS", r.Code(), "%s", r.Body)
		case http.StatusServiceUnavailable:
			require.Equal(t, "SERVICE_BUSY", r.Code(), "%s", r.Body)
			require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
			require.NotEmpty(t, r.Header.Get("Retry-After"))
		default:
			require.Failf(t, "unexpected answer", "%d %s", r.Status, r.Body)
		}
	}
}

// memStartAll starts `app all` on free ports with a database and a BullMQ prefix of its own
// (development defaults otherwise) and waits until /readyz answers 200.
func memStartAll(t *testing.T) (*seedProc, *servicetest.Env) {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/<pid>/status (Linux)")
	}
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	addr := seedFreeAddr(t)
	base := "http://" + addr
	p := seedStartProc(t, "all", seedEnv(db.AppURL, prefix, map[string]string{
		"MIGRATE_DATABASE_URL":     db.OwnerURL,
		"HTTP_ADDR":                addr,
		"PUBLIC_BASE_URL":          base,
		"SANDBOX_MARKETPLACE_ADDR": seedFreeAddr(t),
		"SANDBOX_AI_ADDR":          seedFreeAddr(t),
	}), "all")
	seedWaitHTTP(t, p, base+"/readyz")
	return p, seedChildEnv(t, db, base)
}

// memPeak returns the peak resident set size of the child (VmHWM), in bytes.
func memPeak(t *testing.T, p *seedProc) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	require.FailNow(t, "no VmHWM in /proc/<pid>/status")
	return 0
}

// memUpload runs the media flow for data (describe, PUT to the upload URL, complete with an
// Idempotency-Key) and returns the id of the processing operation.
func memUpload(t *testing.T, env *servicetest.Env, acct servicetest.Account, filename, contentType string, data []byte) string {
	t.Helper()
	ws := "/v1/workspaces/" + acct.WorkspaceID
	created := env.Do(servicetest.Request{Method: "POST", Path: ws + "/media", Token: acct.AccessToken,
		Body: map[string]any{"filename": filename, "content_type": contentType, "size": len(data)}})
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	m := created.JSON(t)
	mediaID := m["media"].(map[string]any)["id"].(string)
	upload := m["upload"].(map[string]any)
	put, err := http.NewRequest(upload["method"].(string), upload["url"].(string), bytes.NewReader(data))
	require.NoError(t, err)
	for k, v := range upload["headers"].(map[string]any) {
		put.Header.Set(k, v.(string))
	}
	if put.Header.Get("Content-Type") == "" {
		put.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(put)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "PUT %s", filename)
	done := env.Do(servicetest.Request{Method: "POST", Path: ws + "/media/" + mediaID + "/complete", Token: acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()}, Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, done.Status, "%s", done.Body)
	return done.JSON(t)["operation"].(map[string]any)["id"].(string)
}

// memWait polls an operation until it is finished (or fails t after 3 minutes: a bomb may
// take long to process without the fix) and returns its JSON.
func memWait(t *testing.T, env *servicetest.Env, acct servicetest.Account, operationID string) map[string]any {
	t.Helper()
	var op map[string]any
	seedEventually(t, 3*time.Minute, func() bool {
		resp := env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + acct.WorkspaceID + "/operations/" + operationID,
			Token: acct.AccessToken})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		op = resp.JSON(t)["operation"].(map[string]any)
		return op["status"] == "succeeded" || op["status"] == "failed"
	}, "operation %s did not finish", operationID)
	return op
}

// memSmallPNG is a valid 64×48 image.
func memSmallPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 64, 48))
	for y := range 48 {
		for x := range 64 {
			img.Set(x, y, color.NRGBA{uint8(4 * x), uint8(5 * y), 128, 255})
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// memProgressiveJPEG returns a valid progressive, 3-component 4:4:4 JPEG of w×h pixels,
// all of them mid gray, in a few hundred bytes: one AC scan per component whose blocks are
// all covered by end-of-band runs (EOB0..EOB14, at most 32,767 blocks per symbol), and no DC
// scan (every coefficient is zero). Decoding it holds a coefficient block for every 8×8
// block of every component, then the whole image.
func memProgressiveJPEG(w, h int) []byte {
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
	segment(0xC2, sof)                                                   // SOF2: progressive
	dht := []byte{0x10, 0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // AC table 0: fifteen 4-bit codes
	for n := byte(0); n <= 14; n++ {
		dht = append(dht, n<<4) // EOBn: a run of 2^n + (n extra bits) blocks
	}
	segment(0xC4, dht)
	blocks := ((w + 7) / 8) * ((h + 7) / 8)
	for c := byte(1); c <= 3; c++ {
		segment(0xDA, []byte{1, c, 0x00, 1, 63, 0}) // SOS: component c, AC 1..63
		var bits memBits
		for left := blocks; left > 0; {
			run := min(left, 1<<15-1)
			n := 0
			for 1<<(n+1) <= run {
				n++
			}
			bits.write(uint32(n), 4)        // the code of EOBn is n
			bits.write(uint32(run-1<<n), n) // the run's low bits
			left -= run
		}
		b.Write(bits.flush())
	}
	b.Write([]byte{0xFF, 0xD9}) // EOI
	return b.Bytes()
}

// memBits writes JPEG entropy-coded bits, most significant first, with 0xFF byte stuffing.
type memBits struct {
	out   []byte
	acc   uint64
	nbits int
}

func (w *memBits) write(v uint32, n int) {
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
func (w *memBits) flush() []byte {
	if w.nbits > 0 {
		w.write(1<<(8-w.nbits)-1, 8-w.nbits)
	}
	return w.out
}

// memPNG16 returns a 16-bit RGBA PNG of w×h transparent black pixels; with pixels false it
// stops after the IHDR chunk (a truncated file of 33 bytes).
func memPNG16(w, h int, pixels bool) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 16, 6 // bit depth 16, color type 6 (RGBA)
	memChunk(&b, "IHDR", ihdr)
	if !pixels {
		return b.Bytes()
	}
	memChunk(&b, "IDAT", memZlibZeros(h*(1+8*w))) // each row: filter byte 0, then zeros
	memChunk(&b, "IEND", nil)
	return b.Bytes()
}

func memChunk(b *bytes.Buffer, typ string, data []byte) {
	_ = binary.Write(b, binary.BigEndian, uint32(len(data)))
	b.WriteString(typ)
	b.Write(data)
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	_ = binary.Write(b, binary.BigEndian, crc.Sum32())
}

// memZlibZeros returns a zlib stream of n zero bytes without compressing n bytes (slow
// under -race): the blocks of one compressed MiB, flushed to a byte boundary, decode to
// a MiB of zeros wherever they stand, so they are repeated; a final block holds the rest.
func memZlibZeros(n int) []byte {
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

// TestMemoryBombImagesDecode checks the crafted bombs are what they claim: headers of
// near-cap images (the full decode is left to the child).
func TestMemoryBombImagesDecode(t *testing.T) {
	t.Parallel()
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(memProgressiveJPEG(memBombSide, memBombSide)))
	require.NoError(t, err)
	require.Equal(t, [2]int{memBombSide, memBombSide}, [2]int{cfg.Width, cfg.Height})
	cfg, err = png.DecodeConfig(bytes.NewReader(memPNG16(memBombSide, memBombSide, false)))
	require.NoError(t, err)
	require.Equal(t, [2]int{memBombSide, memBombSide}, [2]int{cfg.Width, cfg.Height})
	require.Equal(t, color.NRGBA64Model, cfg.ColorModel)
	// A small version decodes in full, so the big one is valid too.
	img, err := jpeg.Decode(bytes.NewReader(memProgressiveJPEG(100, 60)))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 100, 60), img.Bounds())
	img, err = png.Decode(bytes.NewReader(memPNG16(300, 200, true)))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 300, 200), img.Bounds())
}
