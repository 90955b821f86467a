package mediaproc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/mediaproc"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/imaging"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/storage"
	"github.com/listingkit/listing/internal/imagebomb"
	"github.com/listingkit/listing/internal/workertest"
)

// countingStorage counts calls and can fail the next Gets.
type countingStorage struct {
	port.ObjectStorage
	gets, puts atomic.Int64
	mu         sync.Mutex
	failGets   int
}

func (c *countingStorage) Get(ctx context.Context, key string) (io.ReadCloser, port.ObjectInfo, error) {
	c.gets.Add(1)
	c.mu.Lock()
	fail := c.failGets > 0
	if fail {
		c.failGets--
	}
	c.mu.Unlock()
	if fail {
		return nil, port.ObjectInfo{}, port.ErrStorageUnavailable.WithCause(errors.New("disk on fire at " + key))
	}
	return c.ObjectStorage.Get(ctx, key)
}

func (c *countingStorage) Put(ctx context.Context, key string, r io.Reader, size int64, ct string) error {
	c.puts.Add(1)
	return c.ObjectStorage.Put(ctx, key, r, size, ct)
}

// bundle is one test's world: an isolated database, a workspace, a storage directory and
// the handler.
type bundle struct {
	*workertest.Env
	dir   string
	store *countingStorage
	h     *mediaproc.Handler
	// inspects counts InspectFunc calls; decoding counts the images held decoded (from
	// InspectFunc to the end of their DeriveFunc), and maxDecoding its highest value.
	inspects, decoding, maxDecoding atomic.Int64
}

type options struct {
	maxBytes     int64
	failAt       int64
	decodes      int
	inspectDelay time.Duration
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	b := &bundle{Env: workertest.New(t), dir: t.TempDir()}
	local, err := storage.NewLocal(storage.LocalConfig{Dir: b.dir})
	require.NoError(t, err)
	t.Cleanup(func() { local.Close() })
	b.store = &countingStorage{ObjectStorage: local}
	if opts.maxBytes == 0 {
		opts.maxBytes = 10 << 20
	}
	deps := b.Deps
	deps.Tx = &workertest.FlakyTx{Transactor: deps.Tx, FailAt: opts.failAt, Times: workertest.CrashTimes}
	b.h, err = mediaproc.New(mediaproc.Config{
		Deps:     deps,
		Tasks:    postgres.NewMediaTasks(),
		Media:    postgres.NewMedia(),
		Storage:  b.store,
		MaxBytes: opts.maxBytes,
		Decodes:  opts.decodes,
		InspectFunc: func(r io.Reader, max int64) (mediaproc.Inspected, error) {
			b.inspects.Add(1)
			n := b.decoding.Add(1)
			for old := b.maxDecoding.Load(); n > old && !b.maxDecoding.CompareAndSwap(old, n); old = b.maxDecoding.Load() {
			}
			time.Sleep(opts.inspectDelay)
			im, err := imaging.Inspect(r, imaging.Limits{MaxBytes: max})
			if err != nil {
				b.decoding.Add(-1)
				return mediaproc.Inspected{}, err
			}
			return mediaproc.Inspected{Info: mediaproc.Info(im.Info), Data: im.Data, DeriveFunc: func() ([]mediaproc.Variant, error) {
				defer b.decoding.Add(-1)
				ds, err := im.Derive(imaging.DefaultVariants)
				out := make([]mediaproc.Variant, len(ds))
				for i, d := range ds {
					out[i] = mediaproc.Variant(d)
				}
				return out, err
			}}, nil
		},
	})
	require.NoError(t, err)
	return b
}

// seed records a media in processing (as the complete command leaves it), its task and its
// operation, and uploads data unless data is nil. It returns the job event.
func (b *bundle) seed(t *testing.T, data []byte, contentType string, declaredSize int64) domain.MediaUploadCompleted {
	t.Helper()
	now := time.Now()
	m, err := domain.NewMedia(uuid.New(), b.Workspace, "photo.png", contentType, declaredSize, 1<<40, now)
	require.NoError(t, err)
	m.Status = domain.MediaProcessing
	op := domain.NewOperation(b.Workspace, b.User, "media.processing", "media", m.ID, now)
	task := domain.MediaTask{Task: domain.NewTask(uuid.New(), b.Workspace, op.ID, now), MediaID: m.ID}
	b.InTx(t, func(ctx context.Context) error { return postgres.NewMedia().Insert(ctx, m) })
	workertest.InsertTask(t, b.Env, postgres.NewMediaTasks(), op, task)
	if data != nil {
		require.NoError(t, b.store.ObjectStorage.Put(context.Background(), domain.MediaObjectKey(b.Workspace, m.ID),
			bytes.NewReader(data), int64(len(data)), contentType))
	}
	return domain.MediaUploadCompleted{MediaID: m.ID, ProcessingID: task.ID, OperationID: op.ID}
}

type state struct {
	task  domain.MediaTask
	op    domain.Operation
	media domain.Media
}

func (b *bundle) state(t *testing.T, ev domain.MediaUploadCompleted) state {
	t.Helper()
	return state{
		task:  workertest.Load(t, b.Env, postgres.NewMediaTasks(), ev.ProcessingID),
		op:    b.Operation(t, ev.OperationID),
		media: workertest.Load(t, b.Env, postgres.NewMedia(), ev.MediaID),
	}
}

// objects maps every stored object's path (relative to the objects directory) to the
// SHA-256 of its bytes.
func (b *bundle) objects(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join(b.dir, "objects")
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		sum := sha256.Sum256(data)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}

func makePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

func variantKeys(ws, media uuid.UUID) []string {
	return []string{
		domain.MediaObjectKey(ws, media),
		domain.MediaVariantKey(ws, media, "thumb"),
		domain.MediaVariantKey(ws, media, "medium"),
	}
}

func requireKeys(t *testing.T, objs map[string]string, keys []string) {
	t.Helper()
	got := make([]string, 0, len(objs))
	for k := range objs {
		got = append(got, k)
	}
	require.ElementsMatch(t, keys, got)
}

func TestValidPNGBecomesReadyAndRedeliveryIsNoOp(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	data := makePNG(t, 1600, 900)
	ev := b.seed(t, data, "image/png", int64(len(data)))

	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 1, false)))

	s := b.state(t, ev)
	require.Equal(t, domain.TaskSucceeded, s.task.Status)
	require.Equal(t, 1, s.task.Attempts)
	require.Equal(t, domain.MediaReady, s.media.Status)
	require.Equal(t, "image/png", s.media.SniffedType)
	require.Equal(t, 1600, s.media.Width)
	require.Equal(t, 900, s.media.Height)
	require.Len(t, s.media.Variants, 2)
	require.Equal(t, "thumb", s.media.Variants[0].Name)
	require.Equal(t, 256, s.media.Variants[0].Width)
	require.Equal(t, 144, s.media.Variants[0].Height)
	require.Equal(t, "medium", s.media.Variants[1].Name)
	require.Equal(t, 1024, s.media.Variants[1].Width)
	require.Empty(t, s.media.RejectReason)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.JSONEq(t, `{"media_id": "`+ev.MediaID.String()+`", "variants": 2}`, string(s.op.Result))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, ev.OperationID), "the finish only")
	objs := b.objects(t)
	requireKeys(t, objs, variantKeys(b.Workspace, ev.MediaID))

	// The variants are what their rows say: JPEGs of the recorded size.
	for _, v := range s.media.Variants {
		rc, info, err := b.store.ObjectStorage.Get(ctx, domain.MediaVariantKey(b.Workspace, ev.MediaID, v.Name))
		require.NoError(t, err)
		cfg, format, err := image.DecodeConfig(rc)
		rc.Close()
		require.NoError(t, err)
		require.Equal(t, "jpeg", format)
		require.Equal(t, v.Width, cfg.Width)
		require.Equal(t, v.Size, info.Size)
	}

	// Redelivery after success: nothing read, written or published again.
	gets, puts := b.store.gets.Load(), b.store.puts.Load()
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	s2 := b.state(t, ev)
	require.Equal(t, s.task.Version, s2.task.Version)
	require.Equal(t, s.op.Version, s2.op.Version)
	require.Equal(t, s.media.UpdatedAt, s2.media.UpdatedAt)
	require.Equal(t, gets, b.store.gets.Load())
	require.Equal(t, puts, b.store.puts.Load())
	require.Equal(t, 1, b.CountOutbox(t, "operation.status_changed", ev.OperationID))
	require.Equal(t, 1, b.CountOutbox(t, "media.ready", ev.MediaID), "one media.ready")
	require.Equal(t, objs, b.objects(t))
}

func TestCrashAfterStoringBeforeRecordingStoresTheSameObjects(t *testing.T) {
	t.Parallel()
	// Call 1 is Step A, call 2 is Step B: it "crashes" after the variants were stored.
	b := setup(t, options{failAt: 2})
	ctx := context.Background()
	data := makePNG(t, 400, 300)
	ev := b.seed(t, data, "image/png", int64(len(data)))

	err := b.h.Handle(ctx, b.Job(t, ev, 1, false))
	require.ErrorIs(t, err, workertest.ErrCrash)
	require.False(t, worker.IsPermanent(err), "a failed step is retried")
	s := b.state(t, ev)
	require.Equal(t, domain.TaskRunning, s.task.Status)
	require.Equal(t, domain.MediaProcessing, s.media.Status)
	require.Equal(t, domain.OperationRunning, s.op.Status)
	first := b.objects(t)
	requireKeys(t, first, variantKeys(b.Workspace, ev.MediaID))
	require.EqualValues(t, 2, b.store.puts.Load())

	// The redelivery derives again and overwrites the same keys with the same bytes.
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	require.Equal(t, first, b.objects(t), "the same set of objects, byte for byte")
	s = b.state(t, ev)
	require.Equal(t, domain.TaskSucceeded, s.task.Status)
	require.Equal(t, 2, s.task.Attempts)
	require.Equal(t, domain.MediaReady, s.media.Status)
	require.Len(t, s.media.Variants, 2)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, ev.OperationID), "succeeded once")
	entries, err := fs.ReadDir(os.DirFS(b.dir), "tmp")
	require.NoError(t, err)
	require.Empty(t, entries, "no partial writes left behind")
}

// requireRejected checks a permanent, recorded, client-visible failure with code.
func requireRejected(t *testing.T, b *bundle, ev domain.MediaUploadCompleted, err error, code string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, worker.IsPermanent(err), "invalid media is not retried: %v", err)
	s := b.state(t, ev)
	require.Equal(t, domain.TaskFailed, s.task.Status)
	require.Equal(t, code, s.task.ErrorCode)
	require.Equal(t, domain.MediaRejected, s.media.Status)
	require.Equal(t, code, s.media.RejectReason)
	require.Empty(t, s.media.Variants)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, code, s.op.ErrorCode)
	require.NotEmpty(t, s.op.ErrorMessage)
	require.NotContains(t, s.op.ErrorMessage, "workspaces/", "no storage key in client messages")
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, ev.OperationID), "the finish only")
	require.Zero(t, b.CountOutbox(t, "media.ready", ev.MediaID), "a rejected media is not ready")
	for k := range b.objects(t) {
		require.NotContains(t, k, ".jpg", "no variant of an invalid media")
	}

	// A redelivery of the failed job changes nothing.
	require.NoError(t, b.h.Handle(context.Background(), b.Job(t, ev, 2, false)))
	require.Equal(t, s, b.state(t, ev))
}

func TestInvalidMediaIsRejected(t *testing.T) {
	t.Parallel()
	valid := makePNG(t, 64, 48)
	corrupt := append(append([]byte(nil), valid[:40]...), bytes.Repeat([]byte{0xAB}, 200)...)
	// Near-cap canvases whose decoding would exceed the default decode budget.
	jpegBomb := imagebomb.ProgressiveJPEG(7071, 7071)
	pngBomb := imagebomb.PNG16(7071, 7071)
	truncatedBomb := imagebomb.TruncatedPNG16(7071, 7071)
	cases := []struct {
		name        string
		data        []byte
		contentType string
		declared    int64
		maxBytes    int64
		code        string
	}{
		{"corrupt bytes", corrupt, "image/png", int64(len(corrupt)), 0, "MEDIA_CORRUPT"},
		{"declared size larger", valid, "image/png", int64(len(valid)) + 10, 0, "MEDIA_SIZE_MISMATCH"},
		{"declared size smaller", valid, "image/png", int64(len(valid)) - 1, 0, "MEDIA_SIZE_MISMATCH"},
		{"sniffed type differs", valid, "image/jpeg", int64(len(valid)), 0, "MEDIA_TYPE_MISMATCH"},
		{"not an image", []byte("<html><body>hello</body></html>"), "image/png", 31, 0, "MEDIA_TYPE_UNSUPPORTED"},
		{"too large", valid, "image/png", int64(len(valid)), 100, "MEDIA_TOO_LARGE"},
		{"not uploaded", nil, "image/png", 1234, 0, "MEDIA_NOT_UPLOADED"},
		{"progressive jpeg bomb", jpegBomb, "image/jpeg", int64(len(jpegBomb)), 0, "MEDIA_TOO_LARGE"},
		{"16-bit png bomb", pngBomb, "image/png", int64(len(pngBomb)), 0, "MEDIA_TOO_LARGE"},
		{"truncated png bomb", truncatedBomb, "image/png", int64(len(truncatedBomb)), 0, "MEDIA_TOO_LARGE"},
	}
	b := setup(t, options{})
	small := setup(t, options{maxBytes: 100})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bb := b
			if tc.maxBytes != 0 {
				bb = small
			}
			ev := bb.seed(t, tc.data, tc.contentType, tc.declared)
			err := bb.h.Handle(context.Background(), bb.Job(t, ev, 1, false))
			requireRejected(t, bb, ev, err, tc.code)
		})
	}
}

func TestStorageUnavailableIsRetriedThenRecordedOnLastAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	data := makePNG(t, 80, 60)

	// Retryable, then success.
	ev := b.seed(t, data, "image/png", int64(len(data)))
	b.store.failGets = 1
	err := b.h.Handle(ctx, b.Job(t, ev, 1, false))
	require.ErrorIs(t, err, port.ErrStorageUnavailable)
	require.False(t, worker.IsPermanent(err))
	require.NotContains(t, err.Error(), "workspaces/", "no storage key in the job's error")
	s := b.state(t, ev)
	require.Equal(t, domain.TaskRunning, s.task.Status)
	require.Equal(t, domain.MediaProcessing, s.media.Status)
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	s = b.state(t, ev)
	require.Equal(t, domain.TaskSucceeded, s.task.Status)
	require.Equal(t, 2, s.task.Attempts)
	require.Equal(t, domain.MediaReady, s.media.Status)

	// The last attempt records the failure with a client-safe code.
	ev = b.seed(t, data, "image/png", int64(len(data)))
	b.store.failGets = 1
	err = b.h.Handle(ctx, b.Job(t, ev, 5, true))
	require.True(t, worker.IsPermanent(err))
	s = b.state(t, ev)
	require.Equal(t, domain.TaskFailed, s.task.Status)
	require.Equal(t, "STORAGE_UNAVAILABLE", s.task.ErrorCode)
	require.Equal(t, domain.MediaRejected, s.media.Status)
	require.Equal(t, "STORAGE_UNAVAILABLE", s.media.RejectReason)
	require.Equal(t, domain.OperationFailed, s.op.Status)
	require.Equal(t, "STORAGE_UNAVAILABLE", s.op.ErrorCode)
	require.NotContains(t, s.op.ErrorMessage, "disk on fire")
}

func TestUnknownTaskIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ev := domain.MediaUploadCompleted{MediaID: uuid.New(), ProcessingID: uuid.New(), OperationID: uuid.New()}
	err := b.h.Handle(context.Background(), b.Job(t, ev, 1, false))
	require.Error(t, err)
	require.True(t, worker.IsPermanent(err))

	bad := worker.Job{ID: "x", WorkspaceID: b.Workspace, EventType: ev.EventType(), Payload: []byte(`{`), Attempt: 1}
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), bad)))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := mediaproc.New(mediaproc.Config{})
	require.Error(t, err)
}

// TestDecodesBoundTheImagesHeldDecoded: with Decodes 1, concurrent deliveries hold one
// decoded image at a time, and each original is decoded once; with Decodes 3 they overlap
// (so the measure can see an overlap).
func TestDecodesBoundTheImagesHeldDecoded(t *testing.T) {
	t.Parallel()
	for _, decodes := range []int{1, 3} {
		t.Run(fmt.Sprint(decodes), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{decodes: decodes, inspectDelay: 50 * time.Millisecond})
			data := makePNG(t, 300, 200)
			const jobs = 4
			evs := make([]domain.MediaUploadCompleted, jobs)
			for i := range evs {
				evs[i] = b.seed(t, data, "image/png", int64(len(data)))
			}
			var wg sync.WaitGroup
			errs := make([]error, jobs)
			for i, ev := range evs {
				job := b.Job(t, ev, 1, false)
				wg.Go(func() { errs[i] = b.h.Handle(context.Background(), job) })
			}
			wg.Wait()
			for i, ev := range evs {
				require.NoError(t, errs[i])
				require.Equal(t, domain.MediaReady, b.state(t, ev).media.Status)
			}
			require.Equal(t, int64(jobs), b.inspects.Load(), "one decode per delivery")
			if decodes == 1 {
				require.Equal(t, int64(1), b.maxDecoding.Load())
			} else {
				require.Greater(t, b.maxDecoding.Load(), int64(1))
			}
		})
	}
}
