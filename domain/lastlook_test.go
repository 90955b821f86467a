package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
)

func TestLastLookRequestedIsItsRequestWithTheHeldFailure(t *testing.T) {
	req := domain.PublicationRequested{PublicationID: uuid.New(), OperationID: uuid.New(), ProductRevision: 3}
	e := domain.LastLookRequested{Request: req, Code: "DELIVERY_EXHAUSTED", Message: "m"}
	require.Equal(t, req.EventType(), e.EventType())
	require.Equal(t, req.AggregateType(), e.AggregateType())
	require.Equal(t, req.AggregateID(), e.AggregateID())
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	var back domain.PublicationRequested
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, req, back, "a worker reads it as its request")
	var look struct {
		L domain.LastLook `json:"last_look"`
	}
	require.NoError(t, json.Unmarshal(raw, &look))
	require.Equal(t, domain.LastLook{Code: "DELIVERY_EXHAUSTED", Message: "m"}, look.L)
}
