package mediaproc_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"io/fs"
	"log/slog"
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
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/storage"
)

// flakyTx fails the failAt-th InTx call (1-based) without running it: a crash or a lost
// database connection at that step.
type flakyTx struct {
	port.Transactor
	failAt int64
	calls  atomic.Int64
}

var errCrash = errors.New("simulated crash: the step did not run")

func (f *flakyTx) InTx(ctx context.Context, ws, user uuid.UUID, fn func(ctx context.Context) error) error {
	if f.calls.Add(1) == f.failAt {
		return errCrash
	}
	return f.Transactor.InTx(ctx, ws, user, fn)
}

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
	db       *pgtest.DB
	ws, user uuid.UUID
	dir      string
	store    *countingStorage
	tx       *flakyTx
	h        *mediaproc.Handler
}

type options struct {
	maxBytes int64
	failAt   int64
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	db := pgtest.New(t)
	b := &bundle{db: db, ws: uuid.New(), user: uuid.New(), dir: t.TempDir()}
	_, err := db.Owner.Exec(context.Background(), `
		WITH u AS (INSERT INTO users (id, email, password_hash) VALUES ($2, $3, 'x')),
		     w AS (INSERT INTO workspaces (id, name) VALUES ($1, 'ws'))
		SELECT 1`, b.ws, b.user, b.user.String()+"@example.test")
	require.NoError(t, err)
	_, err = db.Owner.Exec(context.Background(),
		`INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, b.ws, b.user)
	require.NoError(t, err)

	local, err := storage.NewLocal(storage.LocalConfig{Dir: b.dir})
	require.NoError(t, err)
	t.Cleanup(func() { local.Close() })
	b.store = &countingStorage{ObjectStorage: local}
	b.tx = &flakyTx{Transactor: postgres.Transactor{Pool: db.App}, failAt: opts.failAt}
	events, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: outbox.Routes(worker.Routes())})
	require.NoError(t, err)
	if opts.maxBytes == 0 {
		opts.maxBytes = 10 << 20
	}
	b.h, err = mediaproc.New(mediaproc.Config{
		Deps: worker.Deps{Tx: b.tx, Operations: postgres.NewOperations(), Events: events, Now: time.Now,
			Log: slog.New(slog.DiscardHandler)},
		Tasks:    postgres.NewMediaTasks(),
		Media:    postgres.NewMedia(),
		Storage:  b.store,
		MaxBytes: opts.maxBytes,
		InspectFunc: func(r io.Reader, max int64) (mediaproc.Info, []byte, error) {
			info, data, err := imaging.Inspect(r, max)
			return mediaproc.Info(info), data, err
		},
		DeriveFunc: func(data []byte) ([]mediaproc.Variant, error) {
			ds, err := imaging.Derive(data, imaging.DefaultVariants)
			out := make([]mediaproc.Variant, len(ds))
			for i, d := range ds {
				out[i] = mediaproc.Variant(d)
			}
			return out, err
		},
	})
	require.NoError(t, err)
	return b
}

func (b *bundle) inTx(t *testing.T, fn func(ctx context.Context) error) {
	t.Helper()
	require.NoError(t, postgres.Transactor{Pool: b.db.App}.InTx(context.Background(), b.ws, b.user, fn))
}

// seed records a media in processing (as the complete command leaves it), its task and its
// operation, and uploads data unless data is nil. It returns the job event.
func (b *bundle) seed(t *testing.T, data []byte, contentType string, declaredSize int64) domain.MediaUploadCompleted {
	t.Helper()
	now := time.Now()
	m, err := domain.NewMedia(uuid.New(), b.ws, "photo.png", contentType, declaredSize, 1<<40, now)
	require.NoError(t, err)
	m.Status = domain.MediaProcessing
	op := domain.NewOperation(b.ws, b.user, "media.processing", "media", m.ID, now)
	task := domain.MediaTask{Task: domain.NewTask(uuid.New(), b.ws, op.ID, now), MediaID: m.ID}
	b.inTx(t, func(ctx context.Context) error {
		if err := postgres.NewMedia().Insert(ctx, m); err != nil {
			return err
		}
		if err := postgres.NewOperations().Insert(ctx, op); err != nil {
			return err
		}
		return postgres.NewMediaTasks().Insert(ctx, task)
	})
	if data != nil {
		require.NoError(t, b.store.ObjectStorage.Put(context.Background(), domain.MediaObjectKey(b.ws, m.ID),
			bytes.NewReader(data), int64(len(data)), contentType))
	}
	return domain.MediaUploadCompleted{MediaID: m.ID, ProcessingID: task.ID, OperationID: op.ID}
}

func (b *bundle) job(t *testing.T, ev domain.MediaUploadCompleted, attempt int, last bool) worker.Job {
	t.Helper()
	raw, err := json.Marshal(ev)
	require.NoError(t, err)
	return worker.Job{ID: "evt-" + ev.ProcessingID.String(), WorkspaceID: b.ws, EventType: ev.EventType(),
		Payload: raw, Attempt: attempt, LastAttempt: last}
}

type state struct {
	task  domain.MediaTask
	op    domain.Operation
	media domain.Media
}

func (b *bundle) state(t *testing.T, ev domain.MediaUploadCompleted) state {
	t.Helper()
	var s state
	b.inTx(t, func(ctx context.Context) error {
		var err error
		if s.task, err = postgres.NewMediaTasks().Get(ctx, ev.ProcessingID); err != nil {
			return err
		}
		if s.op, err = postgres.NewOperations().Get(ctx, ev.OperationID); err != nil {
			return err
		}
		s.media, err = postgres.NewMedia().Get(ctx, ev.MediaID)
		return err
	})
	return s
}

// statusEvents counts the outbox rows of an operation's status changes.
func (b *bundle) statusEvents(t *testing.T, opID uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Owner.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_events WHERE workspace_id = $1 AND event_type = 'operation.status_changed' AND aggregate_id = $2`,
		b.ws, opID.String()).Scan(&n))
	return n
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

	require.NoError(t, b.h.Handle(ctx, b.job(t, ev, 1, false)))

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
	require.Equal(t, 2, b.statusEvents(t, ev.OperationID), "running and succeeded")
	objs := b.objects(t)
	requireKeys(t, objs, variantKeys(b.ws, ev.MediaID))

	// The variants are what their rows say: JPEGs of the recorded size.
	for _, v := range s.media.Variants {
		rc, info, err := b.store.ObjectStorage.Get(ctx, domain.MediaVariantKey(b.ws, ev.MediaID, v.Name))
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
	require.NoError(t, b.h.Handle(ctx, b.job(t, ev, 2, false)))
	s2 := b.state(t, ev)
	require.Equal(t, s.task.Version, s2.task.Version)
	require.Equal(t, s.op.Version, s2.op.Version)
	require.Equal(t, s.media.UpdatedAt, s2.media.UpdatedAt)
	require.Equal(t, gets, b.store.gets.Load())
	require.Equal(t, puts, b.store.puts.Load())
	require.Equal(t, 2, b.statusEvents(t, ev.OperationID))
	require.Equal(t, objs, b.objects(t))
}

func TestCrashAfterStoringBeforeRecordingStoresTheSameObjects(t *testing.T) {
	t.Parallel()
	// Call 1 is Step A, call 2 is Step B: it "crashes" after the variants were stored.
	b := setup(t, options{failAt: 2})
	ctx := context.Background()
	data := makePNG(t, 400, 300)
	ev := b.seed(t, data, "image/png", int64(len(data)))

	err := b.h.Handle(ctx, b.job(t, ev, 1, false))
	require.ErrorIs(t, err, errCrash)
	require.False(t, worker.IsPermanent(err), "a failed step is retried")
	s := b.state(t, ev)
	require.Equal(t, domain.TaskRunning, s.task.Status)
	require.Equal(t, domain.MediaProcessing, s.media.Status)
	require.Equal(t, domain.OperationRunning, s.op.Status)
	first := b.objects(t)
	requireKeys(t, first, variantKeys(b.ws, ev.MediaID))
	require.EqualValues(t, 2, b.store.puts.Load())

	// The redelivery derives again and overwrites the same keys with the same bytes.
	require.NoError(t, b.h.Handle(ctx, b.job(t, ev, 2, false)))
	require.Equal(t, first, b.objects(t), "the same set of objects, byte for byte")
	s = b.state(t, ev)
	require.Equal(t, domain.TaskSucceeded, s.task.Status)
	require.Equal(t, 2, s.task.Attempts)
	require.Equal(t, domain.MediaReady, s.media.Status)
	require.Len(t, s.media.Variants, 2)
	require.Equal(t, domain.OperationSucceeded, s.op.Status)
	require.Equal(t, 2, b.statusEvents(t, ev.OperationID), "running once, succeeded once")
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
	require.Equal(t, 2, b.statusEvents(t, ev.OperationID), "running and failed")
	for k := range b.objects(t) {
		require.NotContains(t, k, ".jpg", "no variant of an invalid media")
	}

	// A redelivery of the failed job changes nothing.
	require.NoError(t, b.h.Handle(context.Background(), b.job(t, ev, 2, false)))
	require.Equal(t, s, b.state(t, ev))
}

func TestInvalidMediaIsRejected(t *testing.T) {
	t.Parallel()
	valid := makePNG(t, 64, 48)
	corrupt := append(append([]byte(nil), valid[:40]...), bytes.Repeat([]byte{0xAB}, 200)...)
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
			err := bb.h.Handle(context.Background(), bb.job(t, ev, 1, false))
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
	err := b.h.Handle(ctx, b.job(t, ev, 1, false))
	require.ErrorIs(t, err, port.ErrStorageUnavailable)
	require.False(t, worker.IsPermanent(err))
	require.NotContains(t, err.Error(), "workspaces/", "no storage key in the job's error")
	s := b.state(t, ev)
	require.Equal(t, domain.TaskRunning, s.task.Status)
	require.Equal(t, domain.MediaProcessing, s.media.Status)
	require.NoError(t, b.h.Handle(ctx, b.job(t, ev, 2, false)))
	s = b.state(t, ev)
	require.Equal(t, domain.TaskSucceeded, s.task.Status)
	require.Equal(t, 2, s.task.Attempts)
	require.Equal(t, domain.MediaReady, s.media.Status)

	// The last attempt records the failure with a client-safe code.
	ev = b.seed(t, data, "image/png", int64(len(data)))
	b.store.failGets = 1
	err = b.h.Handle(ctx, b.job(t, ev, 5, true))
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
	err := b.h.Handle(context.Background(), b.job(t, ev, 1, false))
	require.Error(t, err)
	require.True(t, worker.IsPermanent(err))

	bad := worker.Job{ID: "x", WorkspaceID: b.ws, EventType: ev.EventType(), Payload: []byte(`{`), Attempt: 1}
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), bad)))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := mediaproc.New(mediaproc.Config{})
	require.Error(t, err)
}
