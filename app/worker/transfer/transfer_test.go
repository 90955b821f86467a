package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/mediaproc"
	"github.com/listingkit/listing/app/worker/transfer"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/fetch"
	"github.com/listingkit/listing/infra/imaging"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/storage"
	"github.com/listingkit/listing/internal/workertest"
)

// source is the material server: it counts the downloads of each path.
type source struct {
	srv   *httptest.Server
	png   []byte
	mu    sync.Mutex
	hits  map[string]int
	fails int // answer 503 to the next fails requests of /flaky.png
}

func newSource(t *testing.T) *source {
	t.Helper()
	s := &source{png: makePNG(t, 300, 200), hits: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		fail := r.URL.Path == "/flaky.png" && s.fails > 0
		if fail {
			s.fails--
		}
		s.mu.Unlock()
		switch r.URL.Path {
		case "/photo.png":
			w.Header().Set("Content-Type", "image/png")
			w.Header().Set("Content-Length", strconv.Itoa(len(s.png)))
			_, _ = w.Write(s.png)
		case "/flaky.png":
			if fail {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(s.png)
		case "/streamed.png":
			// No Content-Length: the limit must hold while reading.
			w.Header().Set("Content-Type", "application/octet-stream")
			for i := 0; i < len(s.png); i += 100 {
				_, _ = w.Write(s.png[i:min(i+100, len(s.png))])
				w.(http.Flusher).Flush()
			}
		case "/page.html":
			_, _ = io.WriteString(w, "<!doctype html><html><body>not an image</body></html>")
		case "/empty":
			w.WriteHeader(http.StatusOK)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *source) url(p string) string { return s.srv.URL + p }

func (s *source) count(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[p]
}

type options struct {
	maxBytes     int64
	failAt       int64
	forbidLocal  bool
	fetchTimeout time.Duration
	resolver     fetch.Resolver
}

type bundle struct {
	*workertest.Env
	store *storage.Local
	src   *source
	h     *transfer.Handler
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	b := &bundle{Env: workertest.New(t), src: newSource(t)}
	var err error
	b.store, err = storage.NewLocal(storage.LocalConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { b.store.Close() })
	fetcher, err := fetch.New(fetch.Config{AllowPrivate: !opts.forbidLocal, Resolver: opts.resolver, Timeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	if opts.maxBytes == 0 {
		opts.maxBytes = 10 << 20
	}
	deps := b.Deps
	deps.Tx = &workertest.FlakyTx{Transactor: deps.Tx, FailAt: opts.failAt, Times: workertest.CrashTimes}
	b.h, err = transfer.New(transfer.Config{Deps: deps, Transfers: postgres.NewMaterialTransfers(),
		Media: postgres.NewMedia(), MediaTasks: postgres.NewMediaTasks(), Storage: b.store, Fetcher: fetcher,
		MaxBytes: opts.maxBytes})
	require.NoError(t, err)
	return b
}

// seed records a pending transfer and its operation, as the command does.
func (b *bundle) seed(t *testing.T, sourceURL string) domain.MaterialTransferRequested {
	t.Helper()
	now := time.Now()
	id := uuid.New()
	op := domain.NewOperation(b.Workspace, b.User, "material_transfer", "material_transfer", id, now)
	tr := domain.MaterialTransfer{Task: domain.NewTask(id, b.Workspace, op.ID, now), SourceURL: sourceURL, MediaID: uuid.New()}
	workertest.InsertTask(t, b.Env, postgres.NewMaterialTransfers(), op, tr)
	return domain.MaterialTransferRequested{TransferID: id, OperationID: op.ID, MediaID: tr.MediaID}
}

func (b *bundle) transfer(t *testing.T, ev domain.MaterialTransferRequested) (domain.MaterialTransfer, domain.Operation) {
	t.Helper()
	return workertest.Load(t, b.Env, postgres.NewMaterialTransfers(), ev.TransferID), b.Operation(t, ev.OperationID)
}

func (b *bundle) mediaRows(t *testing.T) int {
	return b.Count(t, `SELECT count(*) FROM media WHERE workspace_id = $1`, b.Workspace)
}

func (b *bundle) uploadCompletedEvents(t *testing.T) []domain.MediaUploadCompleted {
	t.Helper()
	rows, err := b.DB.Owner.Query(context.Background(),
		`SELECT event_payload FROM outbox_all_events WHERE workspace_id = $1 AND event_type = 'media.upload_completed'`, b.Workspace)
	require.NoError(t, err)
	defer rows.Close()
	var out []domain.MediaUploadCompleted
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var ev domain.MediaUploadCompleted
		require.NoError(t, json.Unmarshal(raw, &ev))
		out = append(out, ev)
	}
	require.NoError(t, rows.Err())
	return out
}

func makePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 200, 255})
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

func (b *bundle) mediaproc(t *testing.T) *mediaproc.Handler {
	t.Helper()
	h, err := mediaproc.New(mediaproc.Config{Deps: b.Deps, Tasks: postgres.NewMediaTasks(), Media: postgres.NewMedia(),
		Storage: b.store, MaxBytes: 10 << 20,
		InspectFunc: func(r io.Reader, max int64) (mediaproc.Inspected, error) {
			im, err := imaging.Inspect(r, imaging.Limits{MaxBytes: max})
			if err != nil {
				return mediaproc.Inspected{}, err
			}
			return mediaproc.Inspected{Info: mediaproc.Info(im.Info), Data: im.Data, DeriveFunc: func() ([]mediaproc.Variant, error) {
				ds, err := im.Derive(imaging.DefaultVariants)
				out := make([]mediaproc.Variant, len(ds))
				for i, d := range ds {
					out[i] = mediaproc.Variant(d)
				}
				return out, err
			}}, nil
		}})
	require.NoError(t, err)
	return h
}

func TestTransferStoresMediaAndStartsProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	ev := b.seed(t, b.src.url("/photo.png?sig=secret"))

	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 1, false)))
	require.Equal(t, 1, b.src.count("/photo.png"))

	tr, op := b.transfer(t, ev)
	require.Equal(t, domain.TaskSucceeded, tr.Status)
	require.True(t, tr.Stored)
	require.EqualValues(t, len(b.src.png), tr.Bytes)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	taskID, procOpID := transfer.ProcessingIDs(ev.TransferID)
	require.JSONEq(t, `{"transfer_id": "`+ev.TransferID.String()+`", "media_id": "`+ev.MediaID.String()+
		`", "bytes": `+strconv.Itoa(len(b.src.png))+`, "processing_operation_id": "`+procOpID.String()+`"}`, string(op.Result))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, ev.OperationID), "the finish only")
	// The download reported its progress once (it took less than a second), of the source's length.
	require.NotNil(t, op.Progress)
	require.Positive(t, op.Progress.Done)
	require.Equal(t, int64(len(b.src.png)), *op.Progress.Total)
	require.Equal(t, 1, b.CountOutbox(t, "operation.progressed", ev.OperationID))

	// The object, byte for byte.
	rc, info, err := b.store.Get(ctx, domain.MediaObjectKey(b.Workspace, ev.MediaID))
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	require.Equal(t, b.src.png, got)
	require.Equal(t, "image/png", info.ContentType)

	// The media, its processing task and operation, and the event that starts it.
	var m domain.Media
	var mt domain.MediaTask
	var procOp domain.Operation
	b.InTx(t, func(ctx context.Context) error {
		var err error
		if m, err = postgres.NewMedia().Get(ctx, ev.MediaID); err != nil {
			return err
		}
		if mt, err = postgres.NewMediaTasks().Get(ctx, taskID); err != nil {
			return err
		}
		procOp, err = postgres.NewOperations().Get(ctx, procOpID)
		return err
	})
	require.Equal(t, domain.MediaProcessing, m.Status)
	require.Equal(t, "transfer", m.Source)
	require.Equal(t, "photo.png", m.Filename)
	require.Equal(t, "image/png", m.ContentType)
	require.EqualValues(t, len(b.src.png), m.Size)
	require.Equal(t, domain.TaskPending, mt.Status)
	require.Equal(t, ev.MediaID, mt.MediaID)
	require.Equal(t, procOpID, mt.OperationID)
	require.Equal(t, "media.processing", procOp.Type)
	require.Equal(t, domain.OperationPending, procOp.Status)
	require.Equal(t, "media", procOp.ResourceType)
	require.Equal(t, ev.MediaID, procOp.ResourceID)
	require.Equal(t, b.User, procOp.CreatedBy)
	require.Equal(t, 1, b.CountOutbox(t, "operation.status_changed", procOpID), "pending")
	started := b.uploadCompletedEvents(t)
	require.Equal(t, []domain.MediaUploadCompleted{{MediaID: ev.MediaID, ProcessingID: taskID, OperationID: procOpID}}, started)

	// No source URL (nor its query) in the outbox or the operations.
	require.Zero(t, b.Count(t, `SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND (event_payload::text LIKE '%sig=%' OR event_payload::text LIKE '%127.0.0.1%')`, b.Workspace))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM operations WHERE workspace_id = $1 AND (result::text LIKE '%127.0.0.1%' OR error_message LIKE '%127.0.0.1%')`, b.Workspace))

	// Redelivery after success: no download, nothing written.
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	require.Equal(t, 1, b.src.count("/photo.png"))
	tr2, op2 := b.transfer(t, ev)
	require.Equal(t, tr.Version, tr2.Version)
	require.Equal(t, op.Version, op2.Version)
	require.Equal(t, 1, b.mediaRows(t))
	require.Len(t, b.uploadCompletedEvents(t), 1)
	require.Equal(t, 1, b.CountOutbox(t, "operation.status_changed", ev.OperationID))

	// The media-processing flow takes it from there.
	require.NoError(t, b.mediaproc(t).Handle(ctx, b.Job(t, started[0], 1, false)))
	b.InTx(t, func(ctx context.Context) error {
		var err error
		m, err = postgres.NewMedia().Get(ctx, ev.MediaID)
		return err
	})
	require.Equal(t, domain.MediaReady, m.Status)
	require.Equal(t, 300, m.Width)
	require.Len(t, m.Variants, 2)
}

func TestCrashAfterStoringBeforeRecordingDoesNotDownloadAgain(t *testing.T) {
	t.Parallel()
	// Transaction 1 is Step A, 2 the download's progress report (its first read), 3 Step B:
	// it "crashes" after the object was stored.
	b := setup(t, options{failAt: 3})
	ctx := context.Background()
	ev := b.seed(t, b.src.url("/streamed.png"))

	err := b.h.Handle(ctx, b.Job(t, ev, 1, false))
	require.ErrorIs(t, err, workertest.ErrCrash)
	require.False(t, worker.IsPermanent(err))
	require.Equal(t, 1, b.src.count("/streamed.png"))
	tr, op := b.transfer(t, ev)
	require.Equal(t, domain.TaskRunning, tr.Status)
	require.False(t, tr.Stored)
	require.Equal(t, domain.OperationRunning, op.Status)
	require.Zero(t, b.mediaRows(t))
	_, err = b.store.Stat(ctx, domain.MediaObjectKey(b.Workspace, ev.MediaID))
	require.NoError(t, err, "the object was stored before the crash")

	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	require.Equal(t, 1, b.src.count("/streamed.png"), "the stored object is not downloaded again")
	tr, op = b.transfer(t, ev)
	require.Equal(t, domain.TaskSucceeded, tr.Status)
	require.Equal(t, 2, tr.Attempts)
	require.True(t, tr.Stored)
	require.EqualValues(t, len(b.src.png), tr.Bytes)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, 1, b.mediaRows(t))
	require.Len(t, b.uploadCompletedEvents(t), 1)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, ev.OperationID), "succeeded once")

	var m domain.Media
	b.InTx(t, func(ctx context.Context) error {
		var err error
		m, err = postgres.NewMedia().Get(ctx, ev.MediaID)
		return err
	})
	require.Equal(t, "image/png", m.ContentType, "sniffed, not the source's octet-stream")
	require.EqualValues(t, len(b.src.png), m.Size)
}

func TestConcurrentDeliveriesCreateOneMedia(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	ev := b.seed(t, b.src.url("/photo.png"))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.h.Handle(ctx, b.Job(t, ev, 1, false))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	tr, op := b.transfer(t, ev)
	require.Equal(t, domain.TaskSucceeded, tr.Status)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, 1, b.mediaRows(t))
	require.Len(t, b.uploadCompletedEvents(t), 1)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM media_processings WHERE workspace_id = $1`, b.Workspace))
	require.Equal(t, 1, b.CountOutbox(t, "operation.status_changed", ev.OperationID))
}

// requireFailed checks a recorded, client-visible failure with code and no media.
func requireFailed(t *testing.T, b *bundle, ev domain.MaterialTransferRequested, err error, code string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, worker.IsPermanent(err), "%v", err)
	require.NotContains(t, err.Error(), "workspaces/", "no storage key in the job's error")
	tr, op := b.transfer(t, ev)
	require.Equal(t, domain.TaskFailed, tr.Status)
	require.Equal(t, code, tr.ErrorCode)
	require.False(t, tr.Stored)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, code, op.ErrorCode)
	require.NotEmpty(t, op.ErrorMessage)
	require.NotContains(t, op.ErrorMessage, "127.0.0.1")
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, ev.OperationID), "the finish only")
	require.Zero(t, b.Count(t, `SELECT count(*) FROM media WHERE id = $1`, ev.MediaID))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM outbox_all_events WHERE event_type = 'media.upload_completed' AND aggregate_id = $1`, ev.MediaID.String()))

	// A redelivery of the failed job does nothing.
	require.NoError(t, b.h.Handle(context.Background(), b.Job(t, ev, 2, false)))
	tr2, op2 := b.transfer(t, ev)
	require.Equal(t, tr.Version, tr2.Version)
	require.Equal(t, op.Version, op2.Version)
}

func TestPermanentSourceFailures(t *testing.T) {
	t.Parallel()
	small := setup(t, options{maxBytes: 100})
	require.Greater(t, len(small.src.png), 100)
	forbid := setup(t, options{forbidLocal: true})
	// A name is checked where the connection is made: one resolving to the IPv4-translated
	// form of loopback (::ffff:0:127.0.0.1) fails the operation.
	translated := setup(t, options{forbidLocal: true, resolver: fixedResolver{netip.MustParseAddr("::ffff:0:7f00:1")}})
	_, srcPort, _ := net.SplitHostPort(translated.src.srv.Listener.Addr().String())
	cases := []struct {
		name string
		b    *bundle
		path string
		code string
		hits int
	}{
		{"too large by Content-Length", small, "/photo.png", "SOURCE_TOO_LARGE", 1},
		{"too large while streaming", small, "/streamed.png", "SOURCE_TOO_LARGE", 1},
		{"private address refused", forbid, "/photo.png", "SOURCE_URL_FORBIDDEN", 0},
		{"name resolving to an IPv4-translated address", translated, "http://translated.example:" + srcPort + "/photo.png", "SOURCE_URL_FORBIDDEN", 0},
		{"source answers 404", small, "/missing.png", "SOURCE_REJECTED", 1},
		{"empty source", small, "/empty", "SOURCE_REJECTED", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.path
			if strings.HasPrefix(u, "/") {
				u = tc.b.src.url(tc.path)
			}
			before := tc.b.src.count(tc.path)
			ev := tc.b.seed(t, u)
			err := tc.b.h.Handle(context.Background(), tc.b.Job(t, ev, 1, false))
			requireFailed(t, tc.b, ev, err, tc.code)
			require.Equal(t, tc.hits, tc.b.src.count(tc.path)-before, "downloads")
			if tc.code == "SOURCE_TOO_LARGE" {
				_, err := tc.b.store.Stat(context.Background(), domain.MediaObjectKey(tc.b.Workspace, ev.MediaID))
				require.ErrorIs(t, err, port.ErrObjectNotFound, "nothing stored")
			}
		})
	}
}

func TestUnreachableSourceIsRetriedThenRecordedOnLastAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()

	// 503, then success.
	b.src.mu.Lock()
	b.src.fails = 1
	b.src.mu.Unlock()
	ev := b.seed(t, b.src.url("/flaky.png"))
	err := b.h.Handle(ctx, b.Job(t, ev, 1, false))
	require.ErrorIs(t, err, port.ErrSourceUnreachable)
	require.False(t, worker.IsPermanent(err))
	tr, _ := b.transfer(t, ev)
	require.Equal(t, domain.TaskRunning, tr.Status)
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 2, false)))
	tr, op := b.transfer(t, ev)
	require.Equal(t, domain.TaskSucceeded, tr.Status)
	require.Equal(t, 2, tr.Attempts)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, 2, b.src.count("/flaky.png"))

	// 503 on the last attempt: recorded.
	b.src.mu.Lock()
	b.src.fails = 1
	b.src.mu.Unlock()
	ev = b.seed(t, b.src.url("/flaky.png"))
	err = b.h.Handle(ctx, b.Job(t, ev, 3, true))
	require.True(t, worker.IsPermanent(err))
	tr, op = b.transfer(t, ev)
	require.Equal(t, domain.TaskFailed, tr.Status)
	require.Equal(t, "SOURCE_UNREACHABLE", tr.ErrorCode)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "SOURCE_UNREACHABLE", op.ErrorCode)
}

func TestNonImageSourceIsRejectedByMediaProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	ev := b.seed(t, b.src.url("/page.html"))
	require.NoError(t, b.h.Handle(ctx, b.Job(t, ev, 1, false)))
	tr, _ := b.transfer(t, ev)
	require.Equal(t, domain.TaskSucceeded, tr.Status, "the transfer copied the bytes")
	started := b.uploadCompletedEvents(t)
	require.Len(t, started, 1)
	err := b.mediaproc(t).Handle(ctx, b.Job(t, started[0], 1, false))
	require.True(t, worker.IsPermanent(err))
	var m domain.Media
	b.InTx(t, func(ctx context.Context) error {
		var err error
		m, err = postgres.NewMedia().Get(ctx, ev.MediaID)
		return err
	})
	require.Equal(t, domain.MediaRejected, m.Status)
	require.Equal(t, "MEDIA_TYPE_UNSUPPORTED", m.RejectReason)
	require.Equal(t, "page.html", m.Filename)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := transfer.New(transfer.Config{})
	require.Error(t, err)
}

// fixedResolver answers every name with its addresses.
type fixedResolver []netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}
