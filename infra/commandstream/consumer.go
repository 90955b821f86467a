package commandstream

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/httpapi"
)

// Reply types.
const (
	TypeAccepted = "listing.command.accepted"
	TypeRejected = "listing.command.rejected"
)

// ContentTypeProblem is the datacontenttype of a rejected reply.
const ContentTypeProblem = "application/problem+json"

// Error codes of the command transport.
var (
	// ErrUnauthenticated: unsigned, unknown, revoked or another workspace's sender, or a
	// signature that does not match. One code for all, so that a sender without the secret
	// learns nothing about the integration.
	ErrUnauthenticated = domain.NewError(domain.KindUnauthenticated, "COMMAND_UNAUTHENTICATED",
		"the command is not signed by a live integration of its workspace")
	// ErrMalformed: the entry holds no CloudEvent.
	ErrMalformed = domain.NewError(domain.KindInvalid, "COMMAND_MALFORMED", "the entry is not a CloudEvents 1.0 JSON event")
	// ErrTooLarge: the entry's event is larger than MaxEventBytes.
	ErrTooLarge = domain.NewError(domain.KindTooLarge, "COMMAND_TOO_LARGE", "the command's event is too large")
	// ErrExpired: the command has no time, or one older than MaxAge or more than MaxAhead in
	// the future, and no idempotency record answers it.
	ErrExpired = domain.NewError(domain.KindInvalid, "COMMAND_EXPIRED", "the command's time is missing or out of range")
)

// MaxAhead is how far in the future a command's time may be.
const MaxAhead = 5 * time.Minute

// MaxIDLength bounds a command's id and source, in bytes.
const MaxIDLength = 256

// Executor runs an authenticated command from the command catalogue its HTTP endpoint runs
// from, never through the HTTP router (*httpapi.Server).
type Executor interface {
	ExecuteMessage(ctx context.Context, m httpapi.MessageCommand) httpapi.MessageResult
	MessageProblem(ctx context.Context, m httpapi.MessageCommand, err error) httpapi.MessageResult
}

// Principals finds an integration of a workspace with its sealed secret (query.Queries):
// domain.ErrIntegrationNotFound when the workspace has none with that id.
type Principals interface {
	Principal(ctx context.Context, workspaceID, id uuid.UUID) (domain.Integration, port.SealedSecret, error)
}

// Config configures a Consumer. Client, Executor, Principals and Cipher are required.
type Config struct {
	Client redis.UniversalClient
	// Stream is the commands' stream. Default "listing:commands".
	Stream string
	// Replies is the replies' stream. Default "listing:command-replies".
	Replies string
	// Group is the consumer group. Default "listing".
	Group string
	// Consumer names this consumer in the group. Default host-pid-random: unique per process.
	Consumer string
	// Concurrency is how many entries run at once. Default 8.
	Concurrency int
	// Block bounds how long the consumer waits between reads while the stream has no new
	// entry (it polls, from 10ms doubling up to 200ms). Default 2s.
	Block time.Duration
	// ClaimIdle is how long an entry stays pending before a consumer takes it back. Default 30s.
	ClaimIdle time.Duration
	// ClaimInterval is how often pending entries are looked at. Default ClaimIdle/3.
	ClaimInterval time.Duration
	// MaxDeliveries bounds the deliveries of one entry. Default 10.
	MaxDeliveries int64
	// RepliesMaxLen trims the replies' stream to about this many entries; 0: never. Default 0.
	RepliesMaxLen int64
	// Source is the source of replies. Default "/listing".
	Source string
	// MaxEventBytes bounds an entry's event field; a larger one is refused unread
	// (COMMAND_TOO_LARGE). Default 2 MiB.
	MaxEventBytes int
	// MaxAge is how old a command's time may be (COMMANDS_MAX_AGE); an older one, or one
	// without time, is COMMAND_EXPIRED unless its idempotency record answers it. MaxAge +
	// MaxAhead must be less than the idempotency retention, so that a signed entry cannot
	// outlive its record (config.Validate checks it). Default 24h.
	MaxAge time.Duration

	Executor   Executor
	Principals Principals
	Cipher     port.CredentialCipher

	// Registry receives the metrics; nil: none.
	Registry prometheus.Registerer
	// Logger: default slog.Default().
	Logger *slog.Logger
	// Now: default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Stream == "" {
		c.Stream = "listing:commands"
	}
	if c.Replies == "" {
		c.Replies = "listing:command-replies"
	}
	if c.Group == "" {
		c.Group = "listing"
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Consumer = fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Block <= 0 {
		c.Block = 2 * time.Second
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 30 * time.Second
	}
	if c.ClaimInterval <= 0 {
		c.ClaimInterval = max(c.ClaimIdle/3, 10*time.Millisecond)
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 10
	}
	if c.Source == "" {
		c.Source = "/listing"
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = 2 << 20
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first missing dependency.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("commandstream: Client is required")
	case c.Executor == nil:
		return errors.New("commandstream: Executor is required")
	case c.Principals == nil:
		return errors.New("commandstream: Principals is required")
	case c.Cipher == nil:
		return errors.New("commandstream: Cipher is required")
	}
	return nil
}

// Consumer reads the command stream of its group until its context ends. Several consumers
// (processes) may share a group: each entry goes to one of them, and pending entries of a
// crashed one are taken back by the others.
type Consumer struct {
	cfg     Config
	metrics *metrics
}

// New validates cfg (after defaults) and registers the metrics.
func New(cfg Config) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, metrics: m}, nil
}

// Stream returns the name of the commands' stream.
func (c *Consumer) Stream() string { return c.cfg.Stream }

// Replies returns the name of the replies' stream.
func (c *Consumer) Replies() string { return c.cfg.Replies }

// Run creates the group when it does not exist (reading the stream from its start), then
// reads new entries and takes back idle pending ones until ctx ends; it returns after the
// entries in progress finished. Redis errors are logged and retried, never returned.
func (c *Consumer) Run(ctx context.Context) error {
	log := c.cfg.Logger.With("stream", c.cfg.Stream, "group", c.cfg.Group, "consumer", c.cfg.Consumer)
	log.InfoContext(ctx, "command consumer started")
	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	run := func(msg redis.XMessage, last bool) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.handle(context.WithoutCancel(ctx), msg, last)
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.cfg.ClaimInterval)
		defer t.Stop()
		for {
			c.claim(ctx, log, run)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	groupReady := false
	var wait time.Duration
	for ctx.Err() == nil {
		if !groupReady {
			if err := c.ensureGroup(ctx); err != nil {
				log.WarnContext(ctx, "command consumer: creating the group failed", "err", err)
				sleep(ctx, time.Second)
				continue
			}
			groupReady = true
		}
		msgs, err := c.read(ctx)
		if ctx.Err() != nil {
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "NOGROUP") {
				groupReady = false
			}
			log.WarnContext(ctx, "command consumer: read failed", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if len(msgs) == 0 {
			wait = c.idleWait(wait)
			sleep(ctx, wait)
			continue
		}
		wait = 0
		for _, msg := range msgs {
			run(msg, false)
		}
	}
	log.InfoContext(context.WithoutCancel(ctx), "command consumer stopped")
	return nil
}

func (c *Consumer) ensureGroup(ctx context.Context) error {
	err := c.cfg.Client.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return nil
}

// claim takes back the entries pending for longer than ClaimIdle, whichever consumer holds
// them; an entry delivered MaxDeliveries times or more runs a last time.
func (c *Consumer) claim(ctx context.Context, log *slog.Logger, run func(redis.XMessage, bool)) {
	pending, err := c.cfg.Client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: c.cfg.Stream, Group: c.cfg.Group, Idle: c.cfg.ClaimIdle, Start: "-", End: "+", Count: 100,
	}).Result()
	if err != nil {
		if ctx.Err() == nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
			log.WarnContext(ctx, "command consumer: reading pending entries failed", "err", err)
		}
		return
	}
	for _, p := range pending {
		// MinIdle makes the claim exclusive: of two consumers claiming at once, one gets it.
		msgs, err := c.claimIDs(ctx, p.ID)
		if err != nil {
			if ctx.Err() == nil {
				log.WarnContext(ctx, "command consumer: claiming a pending entry failed", "entry", p.ID, "err", err)
			}
			return
		}
		for _, msg := range msgs {
			c.metrics.reclaimed.Inc()
			run(msg, p.RetryCount+1 >= c.cfg.MaxDeliveries)
		}
	}
}

// outcome is what became of one entry.
type outcome struct {
	kind    string // accepted, replayed, rejected, malformed, unauthenticated
	typ     string // the command type, "unknown" when not one of ours
	reply   cloudevent.Event
	retry   bool // transient: no reply, the entry stays pending
	status  int
	corr    string
	integID string
}

// handle processes one entry: process, then reply and acknowledge unless the failure is
// transient and this is not the last delivery.
func (c *Consumer) handle(ctx context.Context, msg redis.XMessage, last bool) {
	start := c.cfg.Now()
	out := c.process(ctx, msg)
	log := c.cfg.Logger.With("entry", msg.ID, "type", out.typ, "correlation_id", out.corr, "integration_id", out.integID)
	if out.retry && !last {
		c.metrics.count(out.typ, "retried")
		log.WarnContext(ctx, "command deferred: transient failure, the entry stays pending", "status", out.status)
		return
	}
	b, err := cloudevent.Encode(out.reply)
	if err == nil {
		args := &redis.XAddArgs{Stream: c.cfg.Replies, Values: map[string]any{cloudevent.FieldEvent: b}}
		if c.cfg.RepliesMaxLen > 0 {
			args.MaxLen, args.Approx = c.cfg.RepliesMaxLen, true
		}
		err = c.cfg.Client.XAdd(ctx, args).Err()
	}
	if err != nil {
		c.metrics.count(out.typ, "retried")
		log.ErrorContext(ctx, "command reply failed: the entry stays pending", "err", err)
		return
	}
	if err := c.cfg.Client.XAck(ctx, c.cfg.Stream, c.cfg.Group, msg.ID).Err(); err != nil {
		// The entry will be taken back and answered again from the idempotency record.
		log.WarnContext(ctx, "command acknowledgement failed", "err", err)
	}
	c.metrics.count(out.typ, out.kind)
	c.metrics.duration.WithLabelValues(out.typ).Observe(c.cfg.Now().Sub(start).Seconds())
	log.InfoContext(ctx, "command", "outcome", out.kind, "status", out.status, "reply", out.reply.Type,
		"duration_ms", c.cfg.Now().Sub(start).Milliseconds())
}

// process authenticates, decodes and executes one entry and builds its reply.
func (c *Consumer) process(ctx context.Context, msg redis.XMessage) outcome {
	out := outcome{typ: "unknown", corr: msg.ID}
	raw, _ := msg.Values[cloudevent.FieldEvent].(string)
	if _, over := msg.Values[oversizeField]; over || len(raw) > c.cfg.MaxEventBytes {
		return c.reject(ctx, out, "malformed", httpapi.MessageCommand{CorrelationID: out.corr}, ErrTooLarge.WithMessage(
			"the event field holds more than %d bytes", c.cfg.MaxEventBytes))
	}
	ev, err := cloudevent.Decode([]byte(raw))
	if err == nil && (len(ev.ID) > MaxIDLength || len(ev.Source) > MaxIDLength) {
		err = errors.New("id or source too long")
	}
	if err != nil {
		return c.reject(ctx, out, "malformed", httpapi.MessageCommand{CorrelationID: out.corr}, ErrMalformed.WithMessage(
			"the entry's event field must hold a CloudEvents 1.0 JSON event (specversion, id, source, type; id and source of at most %d bytes)", MaxIDLength))
	}
	if _, ok := knownTypes[ev.Type]; ok {
		out.typ = ev.Type
	}
	// Until the sender is authenticated, the reply correlates by the entry id only: never by
	// an id the entry claims.
	mc := httpapi.MessageCommand{Type: ev.Type, CorrelationID: msg.ID, Traceparent: ev.Traceparent}

	integ, err := c.authenticate(ctx, ev, raw, msg.Values[cloudevent.FieldSignature])
	if err != nil {
		if errors.Is(err, ErrUnauthenticated) {
			return c.reject(ctx, out, "unauthenticated", mc, err)
		}
		out = c.reject(ctx, out, "rejected", mc, err)
		out.retry = true
		return out
	}
	out.integID, out.corr, mc.CorrelationID = integ.ID.String(), ev.ID, ev.ID
	mc.WorkspaceID, mc.UserID = integ.WorkspaceID, integ.UserID
	mc.Key = uuid.NewSHA1(uuid.NameSpaceURL, []byte(ev.Source+"/"+ev.ID))
	if ev.DataContentType != "" && !isJSON(ev.DataContentType) {
		res := c.cfg.Executor.MessageProblem(ctx, mc, httpapi.ErrCommandDataInvalid.WithMessage("datacontenttype must be application/json"))
		return c.replyOf(out, res, ev, "rejected", false)
	}
	mc.Data = ev.Data
	if len(mc.Data) == 0 {
		mc.Data = []byte("{}")
	}
	ctx = withPrincipal(ctx, integ.ID)
	if err := c.checkTime(ev.Time); err != nil {
		ctx = withRefusal(ctx, err)
	}
	res := c.cfg.Executor.ExecuteMessage(ctx, mc)
	kind := "rejected"
	if res.Accepted() {
		kind = "accepted"
		if res.Replayed {
			kind = "replayed"
		}
	}
	return c.replyOf(out, res, ev, kind, res.Retryable)
}

// checkTime refuses a command without time, older than MaxAge or more than MaxAhead ahead.
func (c *Consumer) checkTime(t time.Time) error {
	now := c.cfg.Now()
	switch {
	case t.IsZero():
		return ErrExpired.WithMessage("the command's time is required (RFC 3339)")
	case now.Sub(t) > c.cfg.MaxAge:
		return ErrExpired.WithMessage("the command's time is more than %s ago", c.cfg.MaxAge)
	case t.Sub(now) > MaxAhead:
		return ErrExpired.WithMessage("the command's time is more than %s ahead", MaxAhead)
	}
	return nil
}

// authenticate returns the live integration that signed raw, ErrUnauthenticated, or another
// (transient) error.
func (c *Consumer) authenticate(ctx context.Context, ev cloudevent.Event, raw string, sigValue any) (domain.Integration, error) {
	sig, _ := sigValue.(string)
	mac, err := hex.DecodeString(sig)
	if sig == "" || err != nil || len(mac) != sha256.Size {
		return domain.Integration{}, ErrUnauthenticated.WithMessage("the entry has no valid signature field (hex HMAC-SHA256 of the event field)")
	}
	integID, err1 := uuid.Parse(ev.IntegrationID)
	wsID, err2 := uuid.Parse(ev.WorkspaceID)
	if err1 != nil || err2 != nil {
		return domain.Integration{}, ErrUnauthenticated.WithMessage("the event needs the integrationid and workspaceid extensions (UUIDs)")
	}
	integ, sealed, err := c.cfg.Principals.Principal(ctx, wsID, integID)
	if errors.Is(err, domain.ErrIntegrationNotFound) {
		return domain.Integration{}, ErrUnauthenticated
	}
	if err != nil {
		return domain.Integration{}, err
	}
	secret, err := c.cfg.Cipher.Open(sealed.Ciphertext, sealed.KeyID, port.IntegrationSecretAD(integ.WorkspaceID, integ.ID))
	if err != nil {
		return domain.Integration{}, fmt.Errorf("commandstream: open the integration's secret: %w", err)
	}
	h := hmac.New(sha256.New, secret)
	clear(secret)
	h.Write([]byte(raw))
	if !hmac.Equal(h.Sum(nil), mac) {
		return domain.Integration{}, ErrUnauthenticated
	}
	if integ.Revoked() || integ.WorkspaceID != wsID {
		return integ, ErrUnauthenticated.WithMessage("the integration is revoked")
	}
	return integ, nil
}

// reject builds a rejected reply for a refusal decided here.
func (c *Consumer) reject(ctx context.Context, out outcome, kind string, mc httpapi.MessageCommand, err error) outcome {
	res := c.cfg.Executor.MessageProblem(ctx, mc, err)
	out.kind, out.status = kind, res.Status
	out.reply = c.newReply(TypeRejected, out.corr, "", res.Body)
	return out
}

// replyOf builds the reply of an endpoint's answer.
func (c *Consumer) replyOf(out outcome, res httpapi.MessageResult, ev cloudevent.Event, kind string, retry bool) outcome {
	out.kind, out.status, out.retry = kind, res.Status, retry
	typ := TypeRejected
	if res.Accepted() {
		typ = TypeAccepted
	}
	out.reply = c.newReply(typ, ev.ID, ev.WorkspaceID, res.Body)
	out.reply.IntegrationID = ev.IntegrationID
	return out
}

func (c *Consumer) newReply(typ, correlation, workspace string, body []byte) cloudevent.Event {
	id := domain.NewID()
	ct := cloudevent.ContentTypeJSON
	if typ == TypeRejected {
		ct = ContentTypeProblem
	}
	return cloudevent.Event{
		SpecVersion: cloudevent.SpecVersion, ID: id.String(), Type: typ, Source: c.cfg.Source,
		Time: c.cfg.Now().UTC().Truncate(time.Microsecond), DataContentType: ct, Data: body,
		WorkspaceID: workspace, CorrelationID: correlation,
	}
}

// knownTypes are the command types, for the metrics' type label.
var knownTypes = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, t := range httpapi.MessageCommandTypes() {
		m[t] = struct{}{}
	}
	return m
}()

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), cloudevent.ContentTypeJSON)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
