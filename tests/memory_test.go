package tests

// Memory bounds under hostile input (issue 11): an `app all` child, built without -race
// (seedBinary), is fed a media bomb or a burst of failed logins, and the growth of its peak
// resident set (VmHWM) must stay within memGrowthBound.

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/imagebomb"
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
// decoder would hold coefficients for the whole image, a ~390 KB 16-bit RGBA PNG, a PNG of
// under 100 bytes truncated after its header, and a ~290 KB baseline 4:2:0 JPEG (75 MB
// decoded). Each must end refused with MEDIA_TOO_LARGE or processed (the truncated PNG
// refused, the baseline JPEG, within the default decode budget, processed), and the
// process's peak memory must grow by at most memGrowthBound.
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
		{"progressive.jpg", "image/jpeg", imagebomb.ProgressiveJPEG(memBombSide, memBombSide)},
		{"deep.png", "image/png", imagebomb.PNG16(memBombSide, memBombSide)},
		{"truncated.png", "image/png", imagebomb.TruncatedPNG16(memBombSide, memBombSide)},
		{"baseline.jpg", "image/jpeg", imagebomb.BaselineJPEG(memBombSide, memBombSide)},
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
	require.Equal(t, "succeeded", results[3]["status"], "a near-cap baseline JPEG fits the decode budget")
}

// TestMemoryConcurrentFailedLogins sends 20 logins with a wrong password from one address
// at once. Each would hash with argon2id (64 MiB); the process's peak memory must grow by
// at most memGrowthBound. Every answer is 401 INVALID_CREDENTIALS, 429 RATE_LIMITED (the
// address's failed logins for the account are spent), or 503 SERVICE_BUSY (problem+json with
// Retry-After) for those that found no free hashing slot in time.
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
	require.Contains(t, proc.out.String(), `msg="memory limit" bytes=1073741824 source=MEMORY_LIMIT`,
		"the default memory limit is set and logged")
	for _, r := range out {
		switch r.Status {
		case http.StatusUnauthorized:
			require.Equal(t, "INVALID_CREDENTIALS", r.Code(), "%s", r.Body)
		case http.StatusTooManyRequests: // beyond the 5 failed logins one address may make for one account
			require.Equal(t, "RATE_LIMITED", r.Code(), "%s", r.Body)
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
	return memStartAllEnv(t, nil)
}

// memStartAllEnv is memStartAll with extra variables for the child (they replace its own).
func memStartAllEnv(t *testing.T, extra map[string]string) (*seedProc, *servicetest.Env) {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/<pid>/status (Linux)")
	}
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	addr := seedFreeAddr(t)
	base := "http://" + addr
	vars := map[string]string{
		"MIGRATE_DATABASE_URL":     db.OwnerURL,
		"HTTP_ADDR":                addr,
		"PUBLIC_BASE_URL":          base,
		"SANDBOX_MARKETPLACE_ADDR": seedFreeAddr(t),
		"SANDBOX_AI_ADDR":          seedFreeAddr(t),
		// The default (the number of CPUs) of the 2-core reference machine, pinned so that
		// the bound means the same on a larger runner.
		"PASSWORD_HASH_CONCURRENCY": "2",
	}
	maps.Copy(vars, extra)
	p := seedStartProc(t, "all", seedEnv(db.AppURL, prefix, vars), "all")
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

// TestMemoryBombImagesDecode checks the crafted bombs are what they claim: headers of
// near-cap images (the full decode is left to the child).
func TestMemoryBombImagesDecode(t *testing.T) {
	t.Parallel()
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(imagebomb.ProgressiveJPEG(memBombSide, memBombSide)))
	require.NoError(t, err)
	require.Equal(t, [2]int{memBombSide, memBombSide}, [2]int{cfg.Width, cfg.Height})
	cfg, err = png.DecodeConfig(bytes.NewReader(imagebomb.TruncatedPNG16(memBombSide, memBombSide)))
	require.NoError(t, err)
	require.Equal(t, [2]int{memBombSide, memBombSide}, [2]int{cfg.Width, cfg.Height})
	require.Equal(t, color.NRGBA64Model, cfg.ColorModel)
	// A small version decodes in full, so the big one is valid too.
	img, err := jpeg.Decode(bytes.NewReader(imagebomb.ProgressiveJPEG(100, 60)))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 100, 60), img.Bounds())
	img, err = png.Decode(bytes.NewReader(imagebomb.PNG16(300, 200)))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 300, 200), img.Bounds())
	img, err = jpeg.Decode(bytes.NewReader(imagebomb.BaselineJPEG(100, 60)))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 100, 60), img.Bounds())
	require.IsType(t, &image.YCbCr{}, img)
}

// TestMemoryLimitIsSetAtStart: every subcommand sets the runtime's memory limit from
// MEMORY_LIMIT and logs it, unless the operator set GOMEMLIMIT, which wins. (migrate
// against an unreachable database: the limit is set before the subcommand runs.)
func TestMemoryLimitIsSetAtStart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MEMORY_LIMIT": "512MiB"}, `msg="memory limit" bytes=536870912 source=MEMORY_LIMIT`},
		{map[string]string{"MEMORY_LIMIT": "512MiB", "GOMEMLIMIT": "300MiB"}, `msg="memory limit" bytes=314572800 source=GOMEMLIMIT`},
		{map[string]string{"MEMORY_LIMIT": "off"}, `msg="memory limit" bytes=9223372036854775807 source=MEMORY_LIMIT`},
	}
	for _, c := range cases {
		cmd := exec.Command(seedBinary(t), "migrate")
		cmd.Env = []string{"LOG_FORMAT=text", "MIGRATE_DATABASE_URL=postgres://root@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"}
		for k, v := range c.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "migrate cannot reach port 1")
		require.Contains(t, string(out), c.want)
	}
}
