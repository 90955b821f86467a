package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/workertest"
)

// snapshotFixture is a product with a publication and an AI task about it, inserted through
// the repositories as app_user.
type snapshotFixture struct {
	env     *workertest.Env
	product domain.Product
	pub     domain.Publication
	task    domain.AITask
}

func seedSnapshots(t *testing.T) snapshotFixture {
	t.Helper()
	f := snapshotFixture{env: workertest.New(t)}
	e, now := f.env, time.Now()
	var err error
	f.product, err = domain.NewProduct(uuid.New(), e.Workspace, domain.ProductContent{Title: "Mug", Description: "A mug",
		Price: "9.90", Currency: "EUR", Images: []string{"https://img.example.test/a.jpg"}}, now)
	require.NoError(t, err)
	store, err := domain.NewStore(uuid.New(), e.Workspace, "sandbox", "shop-1", "Shop", []string{"sandbox"}, now)
	require.NoError(t, err)
	e.InTx(t, func(ctx context.Context) error {
		if err := (postgres.Products{}).Insert(ctx, f.product); err != nil {
			return err
		}
		return postgres.NewStores().Insert(ctx, store)
	})
	pubOp := domain.NewOperation(e.Workspace, e.User, "publication", "publication", uuid.New(), now)
	f.pub = domain.NewPublication(pubOp.ResourceID, e.Workspace, pubOp.ID, f.product, store.ID, now)
	workertest.InsertTask(t, e, postgres.NewPublications(), pubOp, f.pub)
	taskOp := domain.NewOperation(e.Workspace, e.User, "ai_task", "ai_task", uuid.New(), now)
	f.task, err = domain.NewAITask(taskOp.ResourceID, e.Workspace, taskOp.ID, domain.AIKindText, f.product, "", now)
	require.NoError(t, err)
	workertest.InsertTask(t, e, postgres.NewAITasks(), taskOp, f.task)
	return f
}

func TestTaskSnapshotsRoundTripAndAreWrittenOnce(t *testing.T) {
	t.Parallel()
	f := seedSnapshots(t)
	e, ctx := f.env, context.Background()
	pubs, tasks := postgres.NewPublications(), postgres.NewAITasks()
	want := &domain.ProductSnapshot{Revision: 1, Title: "Mug", Description: "A mug", Price: "9.90", Currency: "EUR",
		Images: []string{"https://img.example.test/a.jpg"}}
	require.Equal(t, want, workertest.Load(t, e, pubs, f.pub.ID).Snapshot)
	require.Equal(t, want, workertest.Load(t, e, tasks, f.task.ID).Snapshot)

	// Save writes the other columns but never replaces a stored snapshot.
	other := &domain.ProductSnapshot{Revision: 1, Title: "Changed", Images: []string{}}
	e.InTx(t, func(ctx context.Context) error {
		if _, err := pubs.Update(ctx, f.pub.ID, func(p *domain.Publication) error {
			p.Snapshot = other
			return p.Start(time.Now())
		}); err != nil {
			return err
		}
		_, err := tasks.Update(ctx, f.task.ID, func(t *domain.AITask) error {
			t.Snapshot = other
			return t.Start(time.Now())
		})
		return err
	})
	gotPub, gotTask := workertest.Load(t, e, pubs, f.pub.ID), workertest.Load(t, e, tasks, f.task.ID)
	require.Equal(t, domain.TaskRunning, gotPub.Status)
	require.Equal(t, want, gotPub.Snapshot)
	require.Equal(t, domain.TaskRunning, gotTask.Status)
	require.Equal(t, want, gotTask.Snapshot)

	// A row without one (stored before sql/007) reads as nil and is filled once.
	_, err := e.DB.Owner.Exec(ctx, `UPDATE ai_tasks SET product_snapshot = NULL WHERE id = $1`, f.task.ID)
	require.NoError(t, err)
	require.Nil(t, workertest.Load(t, e, tasks, f.task.ID).Snapshot)
	for _, s := range []*domain.ProductSnapshot{other, want} {
		e.InTx(t, func(ctx context.Context) error {
			_, err := tasks.Update(ctx, f.task.ID, func(t *domain.AITask) error { t.Snapshot = s; return nil })
			return err
		})
	}
	require.Equal(t, other, workertest.Load(t, e, tasks, f.task.ID).Snapshot, "the first fill stays")
}

func TestPublicationSnapshotMustBeOfItsRevision(t *testing.T) {
	t.Parallel()
	f := seedSnapshots(t)
	_, err := f.env.DB.Owner.Exec(context.Background(),
		`UPDATE publications SET product_snapshot = jsonb_set(product_snapshot, '{revision}', '2') WHERE id = $1`, f.pub.ID)
	require.ErrorContains(t, err, "publications_snapshot_revision")
}

// Migration 007 backfills what is still known and keeps RLS forced; its Down removes it.
func TestMigration007BackfillsSnapshots(t *testing.T) {
	t.Parallel()
	m := pgtest.MigrateTo(t, 6)
	ctx := context.Background()

	// As before 007, as the administrator (RLS does not apply): product a at revision 1,
	// product b edited since its publication was requested; AI tasks pending and finished.
	conn := m.Conn(t)
	ws, store, a, b := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	pubA, pubB, pending, running, done := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	_, err := conn.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO products (id, workspace_id, title, description, price, price_text, currency, images, revision)
		VALUES ($2, $1, 'Mug', 'A mug', 9.9, '9.90', 'EUR', '["https://img.example.test/a.jpg"]', 1),
		       ($3, $1, 'Bowl v2', '', 5, '5.00', 'USD', '[]', 2)`, ws, a, b)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status) VALUES ($2, $1, 'sandbox', 's', 'S', 'verified')`, ws, store)
	require.NoError(t, err)
	for _, id := range []uuid.UUID{pubA, pubB, pending, running, done} {
		_, err = conn.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id) VALUES ($2, $1, 't', 't', $2)`, ws, id)
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO publications (id, workspace_id, operation_id, status, product_id, store_id, product_revision)
		VALUES ($2, $1, $2, 'pending', $4, $6, 1), ($3, $1, $3, 'pending', $5, $6, 1)`, ws, pubA, pubB, a, b, store)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO ai_tasks (id, workspace_id, operation_id, status, kind, product_id)
		VALUES ($2, $1, $2, 'pending', 'text', $5), ($3, $1, $3, 'running', 'text', $6), ($4, $1, $4, 'succeeded', 'text', $5)`,
		ws, pending, running, done, a, b)
	require.NoError(t, err)

	m.UpTo(t, 7)

	snapshot := func(table string, id uuid.UUID) *domain.ProductSnapshot {
		var raw []byte
		require.NoError(t, conn.QueryRow(ctx, `SELECT product_snapshot FROM `+table+` WHERE id = $1`, id).Scan(&raw))
		if raw == nil {
			return nil
		}
		var s domain.ProductSnapshot
		require.NoError(t, json.Unmarshal(raw, &s))
		return &s
	}
	mug := &domain.ProductSnapshot{Revision: 1, Title: "Mug", Description: "A mug", Price: "9.90", Currency: "EUR",
		Images: []string{"https://img.example.test/a.jpg"}}
	bowl := &domain.ProductSnapshot{Revision: 2, Title: "Bowl v2", Price: "5.00", Currency: "USD", Images: []string{}}
	require.Equal(t, mug, snapshot("publications", pubA), "the product is still at the requested revision")
	require.Nil(t, snapshot("publications", pubB), "revision 1 of b is lost")
	require.Equal(t, mug, snapshot("ai_tasks", pending))
	require.Equal(t, bowl, snapshot("ai_tasks", running))
	require.Nil(t, snapshot("ai_tasks", done), "a finished task needs none")

	for _, table := range []string{"products", "publications", "ai_tasks"} {
		var forced bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT relforcerowsecurity FROM pg_class WHERE oid = ('public.' || $1)::regclass`,
			table).Scan(&forced))
		require.True(t, forced, "%s: RLS not forced after 007", table)
	}

	m.DownTo(t, 6)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE column_name = 'product_snapshot'`).Scan(&n))
	require.Zero(t, n)
	m.Up(t)
}
