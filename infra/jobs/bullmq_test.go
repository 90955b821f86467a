package jobs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/jobs"
)

// A failed attempt's job says what failed in terms an operator may read: the domain error's
// code and client message, never another error's text.
func TestBullMQSettleNamesTheFailure(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		err          error
		nack, reason string
	}{
		"a final domain error": {worker.Permanent(domain.ErrStoreNotVerified), bullmq.NackFail,
			"STORE_NOT_VERIFIED: " + domain.ErrStoreNotVerified.Message},
		"a retryable domain error": {domain.NewError(domain.KindUnavailable, "PLATFORM_UNAVAILABLE", "the marketplace is unavailable"),
			bullmq.NackRetry, "PLATFORM_UNAVAILABLE: the marketplace is unavailable"},
		"any other error": {errors.New("dial tcp 10.0.0.7:443: api_key=sk_live_1 refused"), bullmq.NackRetry,
			"failed attempt (no error code: see the work process's log for this job)"},
	} {
		t.Run(name, func(t *testing.T) {
			msg := message.NewMessage("id", nil)
			jobs.BullMQ{}.Settle(ctx, msg, worker.Job{}, tc.err)
			require.Equal(t, tc.nack, msg.Metadata.Get(bullmq.MetadataNack))
			require.Equal(t, tc.reason, msg.Metadata.Get(bullmq.MetadataNackReason))
		})
	}
}
