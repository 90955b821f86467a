-- A store's own budget of requests to its marketplace (PUT .../stores/{id}/rate-limit):
-- rate_per_second tokens a second, up to rate_burst at once. Both 0: the store draws on its
-- platform's budget (STORE_RATE_LIMITS). The limits match domain.RateLimit.Validate.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE stores
  ADD COLUMN rate_per_second double precision NOT NULL DEFAULT 0,
  ADD COLUMN rate_burst      int NOT NULL DEFAULT 0,
  ADD CONSTRAINT stores_rate_limit CHECK (
    (rate_per_second = 0 AND rate_burst = 0)
    OR (rate_per_second > 0 AND rate_per_second <= 1000000 AND rate_burst BETWEEN 1 AND 1000000));
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
ALTER TABLE stores
  DROP CONSTRAINT stores_rate_limit,
  DROP COLUMN rate_burst,
  DROP COLUMN rate_per_second;
RESET ROLE;
