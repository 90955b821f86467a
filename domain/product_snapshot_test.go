package domain_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
)

func TestTasksSnapshotTheProductTheyAreAbout(t *testing.T) {
	now := time.Now()
	p, err := domain.NewProduct(uuid.New(), uuid.New(), domain.ProductContent{Title: "Mug", Price: "1.00", Currency: "EUR",
		Images: []string{"https://img.example.test/a.jpg"}}, now)
	require.NoError(t, err)
	pub := domain.NewPublication(uuid.New(), p.WorkspaceID, uuid.New(), p, uuid.New(), now)
	task, err := domain.NewAITask(uuid.New(), p.WorkspaceID, uuid.New(), domain.AIKindText, p, "", now)
	require.NoError(t, err)

	p.Images[0] = "https://img.example.test/changed.jpg" // the snapshots share no memory with p
	require.NoError(t, p.SaveDraft(1, domain.ProductContent{Title: "Bowl", Price: "2.00", Currency: "USD"}, now))

	want := &domain.ProductSnapshot{Revision: 1, Title: "Mug", Price: "1.00", Currency: "EUR",
		Images: []string{"https://img.example.test/a.jpg"}}
	require.Equal(t, want, pub.Snapshot)
	require.Equal(t, pub.ProductRevision, pub.Snapshot.Revision)
	require.Equal(t, p.ID, pub.ProductID)
	require.Equal(t, want, task.Snapshot)
	require.Equal(t, p.ID, task.ProductID)
}
