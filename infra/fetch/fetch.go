package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Resolver resolves host names; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures New.
type Config struct {
	// AllowPrivate lifts the address deny list (FETCH_ALLOW_PRIVATE=true). Development and
	// tests only. Default false.
	AllowPrivate bool
	// AllowPrefixes are exceptions to the deny list (e.g. an internal mirror). No env var.
	// Default none.
	AllowPrefixes []netip.Prefix
	// Timeout is the total time limit of one fetch, body included (FETCH_TIMEOUT).
	// Default 60s.
	Timeout time.Duration
	// DialTimeout bounds one TCP connect. Default 10s.
	DialTimeout time.Duration
	// MaxRedirects followed, each checked like the first URL. Default 5; negative means
	// none are followed.
	MaxRedirects int
	// DefaultMaxBytes applies when Fetch gets maxBytes <= 0 (FETCH_MAX_BYTES).
	// Default 100 MiB.
	DefaultMaxBytes int64
	// UserAgent header. Default "listing-fetch/1".
	UserAgent string
	// Resolver resolves host names. Default net.DefaultResolver.
	Resolver Resolver
	// Logger gets one debug line per fetch (host, status, duration; never the query string).
	// Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.MaxRedirects == 0 {
		c.MaxRedirects = 5
	}
	if c.DefaultMaxBytes == 0 {
		c.DefaultMaxBytes = 100 << 20
	}
	if c.UserAgent == "" {
		c.UserAgent = "listing-fetch/1"
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field without changing c.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.DialTimeout < 0 || c.DefaultMaxBytes < 0 {
		return errors.New("fetch: Timeout, DialTimeout and DefaultMaxBytes must not be negative")
	}
	for _, p := range c.AllowPrefixes {
		if !p.IsValid() {
			return errors.New("fetch: AllowPrefixes holds an invalid prefix")
		}
	}
	return nil
}

// Fetcher implements port.Fetcher. Safe for concurrent use.
type Fetcher struct {
	cfg    Config
	client *http.Client
	dialer *net.Dialer
	// afterCheck, when set (tests), sees every address that passed the dial-time check,
	// just before connect.
	afterCheck func(network, address string)
}

var _ port.Fetcher = (*Fetcher)(nil)

// New returns a Fetcher.
func New(cfg Config) (*Fetcher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fetch.New: %w", err)
	}
	f := &Fetcher{cfg: cfg}
	f.dialer = &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Control: f.control}
	tr := &http.Transport{
		Proxy:                  nil, // a proxy would make the dial-time check see the proxy's address
		DialContext:            f.dialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           20,
		IdleConnTimeout:        60 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
	return f, nil
}

var (
	errForbidden = port.ErrSourceURLForbidden
	errInvalid   = port.ErrSourceURLInvalid
)

// parseURL accepts absolute http(s) URLs without user info.
func parseURL(raw string) (*url.URL, error) {
	if len(raw) == 0 || len(raw) > 4096 {
		return nil, errInvalid
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return nil, errInvalid
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Opaque != "" {
		return nil, errInvalid
	}
	return u, nil
}

// checkHost refuses a literal forbidden IP, or a name any of whose addresses is forbidden.
func (f *Fetcher) checkHost(ctx context.Context, host string) error {
	if f.cfg.AllowPrivate {
		return nil
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if forbidden(a, f.cfg.AllowPrefixes) {
			return errForbidden
		}
		return nil
	}
	_, err := f.resolve(ctx, host)
	return err
}

// resolve returns host's addresses, refusing all when any one is forbidden.
func (f *Fetcher) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := f.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, port.ErrSourceURLInvalid.WithMessage("source_url's host does not resolve")
		}
		return nil, port.ErrSourceUnreachable.WithCause(err)
	}
	if len(addrs) == 0 {
		return nil, port.ErrSourceURLInvalid.WithMessage("source_url's host does not resolve")
	}
	if !f.cfg.AllowPrivate {
		for _, a := range addrs {
			if forbidden(a, f.cfg.AllowPrefixes) {
				return nil, errForbidden
			}
		}
	}
	return addrs, nil
}

// CheckURL implements port.Fetcher.
func (f *Fetcher) CheckURL(ctx context.Context, sourceURL string) error {
	u, err := parseURL(sourceURL)
	if err != nil {
		return fmt.Errorf("fetch.CheckURL: %w", err)
	}
	if err := f.checkHost(ctx, u.Hostname()); err != nil {
		return fmt.Errorf("fetch.CheckURL: %w", err)
	}
	return nil
}

// dialContext resolves with the guard, then dials the allowed addresses in order. The
// dialer's Control checks each address once more right before connect.
func (f *Fetcher) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, errInvalid
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = f.resolve(ctx, host); err != nil {
		return nil, err
	}
	var firstErr error
	for _, a := range addrs {
		if !f.cfg.AllowPrivate && forbidden(a, f.cfg.AllowPrefixes) {
			return nil, errForbidden
		}
		conn, err := f.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), portStr))
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, errForbidden) || ctx.Err() != nil {
			return nil, err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// control runs after the socket is made and before connect, on the address actually dialed.
func (f *Fetcher) control(network, address string, _ syscall.RawConn) error {
	if !f.cfg.AllowPrivate {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || forbidden(ap.Addr(), f.cfg.AllowPrefixes) {
			return errForbidden
		}
	}
	if f.afterCheck != nil {
		f.afterCheck(network, address)
	}
	return nil
}

func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if f.cfg.MaxRedirects < 0 || len(via) > f.cfg.MaxRedirects {
		return port.ErrSourceRejected.WithMessage("the source redirected too many times")
	}
	u, err := parseURL(req.URL.String())
	if err != nil {
		return err
	}
	// Dial-time checks cover names; refuse literal addresses before anything else happens.
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !f.cfg.AllowPrivate && forbidden(a, f.cfg.AllowPrefixes) {
		return errForbidden
	}
	return nil
}

// Fetch implements port.Fetcher.
func (f *Fetcher) Fetch(ctx context.Context, sourceURL string, maxBytes int64) (rc io.ReadCloser, info port.FetchInfo, err error) {
	const op = "fetch.Fetch"
	if maxBytes <= 0 {
		maxBytes = f.cfg.DefaultMaxBytes
	}
	u, err := parseURL(sourceURL)
	if err != nil {
		return nil, info, fmt.Errorf("%s: %w", op, err)
	}
	start := time.Now()
	status := 0
	defer func() {
		attrs := []any{slog.String("host", u.Hostname()), slog.Int("status", status), slog.Duration("duration", time.Since(start))}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		f.cfg.Logger.DebugContext(ctx, "fetch", attrs...)
	}()
	if a, perr := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); perr == nil && !f.cfg.AllowPrivate && forbidden(a, f.cfg.AllowPrefixes) {
		return nil, info, fmt.Errorf("%s: %w", op, errForbidden)
	}

	fctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return nil, info, fmt.Errorf("%s: %w", op, errInvalid)
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "*/*")
	resp, err := f.client.Do(req)
	if err != nil {
		cancel()
		return nil, info, fmt.Errorf("%s: %w", op, mapError(err, fctx))
	}
	status = resp.StatusCode
	fail := func(e error) (io.ReadCloser, port.FetchInfo, error) {
		resp.Body.Close()
		cancel()
		return nil, port.FetchInfo{}, fmt.Errorf("%s: %w", op, e)
	}
	switch {
	case status >= 200 && status < 300:
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return fail(port.ErrSourceUnreachable.WithMessage("the source answered HTTP %d; retry later", status))
	default:
		return fail(port.ErrSourceRejected.WithMessage("the source answered HTTP %d", status))
	}
	if resp.ContentLength > maxBytes {
		return fail(port.ErrSourceTooLarge.WithMessage("the source is %d bytes, more than the %d allowed", resp.ContentLength, maxBytes))
	}
	info = port.FetchInfo{
		ContentType: resp.Header.Get("Content-Type"),
		Size:        resp.ContentLength,
		FinalURL:    resp.Request.URL.String(),
	}
	return &body{rc: resp.Body, left: maxBytes, max: maxBytes, ctx: fctx, cancel: cancel}, info, nil
}

// mapError turns a client error into a domain error, keeping ours when a check refused.
func mapError(err error, ctx context.Context) error {
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if ctx.Err() != nil {
		return port.ErrSourceUnreachable.WithMessage("the source did not answer in time").WithCause(ctx.Err())
	}
	return port.ErrSourceUnreachable.WithCause(err)
}

// body enforces maxBytes while reading and releases the fetch's context on Close.
type body struct {
	rc     io.ReadCloser
	left   int64
	max    int64
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left = 0
		b.err = fmt.Errorf("fetch.Fetch: %w", port.ErrSourceTooLarge.WithMessage("the source is larger than the %d bytes allowed", b.max))
		return n, b.err
	}
	b.left -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = fmt.Errorf("fetch.Fetch: read: %w", mapError(err, b.ctx))
		return n, b.err
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.cancel()
	return err
}
