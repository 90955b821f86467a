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
	// AllowNetworks are address ranges exempt from the guard (e.g. an internal mirror's).
	// No env var. Default none.
	AllowNetworks []netip.Prefix
	// AllowURLPrefixes are URL prefixes ("http://127.0.0.1:8091/_sandbox/files/") whose URLs
	// may reach any address (FETCH_ALLOW_PREFIXES): a URL matches when its scheme, host and
	// port are the prefix's and its path starts with the prefix's path (no "." or ".."
	// segment). Such a fetch uses connections of its own and follows a redirect only to
	// another matching URL; every other URL stays under the guard. Default none.
	AllowURLPrefixes []string
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
	for _, p := range c.AllowNetworks {
		if !p.IsValid() {
			return errors.New("fetch: AllowNetworks holds an invalid prefix")
		}
	}
	for _, raw := range c.AllowURLPrefixes {
		if _, err := parsePrefix(raw); err != nil {
			return err
		}
	}
	return nil
}

// Fetcher implements port.Fetcher. Safe for concurrent use.
type Fetcher struct {
	cfg      Config
	prefixes []*url.URL
	client   *http.Client
	dialer   *net.Dialer
	// exempt fetches the URLs of AllowURLPrefixes, on connections of its own.
	exempt *http.Client
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
	for _, raw := range cfg.AllowURLPrefixes {
		u, _ := parsePrefix(raw)
		f.prefixes = append(f.prefixes, u)
	}
	f.dialer = &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Control: f.control}
	f.client = &http.Client{Transport: newTransport(f.dialContext), CheckRedirect: f.redirectCheck(false)}
	exemptDialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			if f.afterCheck != nil {
				f.afterCheck(network, address)
			}
			return nil
		}}
	f.exempt = &http.Client{Transport: newTransport(exemptDialer.DialContext), CheckRedirect: f.redirectCheck(true)}
	return f, nil
}

func newTransport(dial func(ctx context.Context, network, address string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // a proxy would make the dial-time check see the proxy's address
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           20,
		IdleConnTimeout:        60 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// parsePrefix accepts an AllowURLPrefixes entry: an http(s) URL with a host, without user
// info, query or fragment.
func parsePrefix(raw string) (*url.URL, error) {
	u, err := parseURL(raw)
	if err != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, fmt.Errorf("fetch: AllowURLPrefixes: %q is not an http(s) URL prefix without query", raw)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// hostPort is u's lower-case host and its port, the scheme's default when none is given.
func hostPort(u *url.URL) (string, string) {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), port
}

// exempted reports whether u falls under one of AllowURLPrefixes.
func (f *Fetcher) exempted(u *url.URL) bool {
	if len(f.prefixes) == 0 {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	h, pt := hostPort(u)
	for _, p := range f.prefixes {
		ph, pp := hostPort(p)
		if u.Scheme == p.Scheme && h == ph && pt == pp && strings.HasPrefix(u.EscapedPath(), p.EscapedPath()) {
			return true
		}
	}
	return false
}

// refusedEarly refuses, without DNS, a URL whose host is a literal address the guard
// refuses or a localhost name (RFC 6761). Other names are checked where the connection is
// made.
func (f *Fetcher) refusedEarly(u *url.URL) bool {
	if f.cfg.AllowPrivate || f.exempted(u) {
		return false
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if a, err := netip.ParseAddr(host); err == nil {
		return forbidden(a, f.cfg.AllowNetworks)
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
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
			if forbidden(a, f.cfg.AllowNetworks) {
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
	if f.refusedEarly(u) {
		return fmt.Errorf("fetch.CheckURL: %w", errForbidden)
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
		if !f.cfg.AllowPrivate && forbidden(a, f.cfg.AllowNetworks) {
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
		if err != nil || forbidden(ap.Addr(), f.cfg.AllowNetworks) {
			return errForbidden
		}
	}
	if f.afterCheck != nil {
		f.afterCheck(network, address)
	}
	return nil
}

// redirectCheck checks each redirect like the first URL. An exempt fetch follows one only to
// another exempt URL; a guarded fetch refuses literal refused addresses at once (names are
// checked at dial time).
func (f *Fetcher) redirectCheck(exempt bool) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if f.cfg.MaxRedirects < 0 || len(via) > f.cfg.MaxRedirects {
			return port.ErrSourceRejected.WithMessage("the source redirected too many times")
		}
		u, err := parseURL(req.URL.String())
		if err != nil {
			return err
		}
		if (exempt && !f.exempted(u)) || (!exempt && f.refusedEarly(u)) {
			return errForbidden
		}
		return nil
	}
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
	if f.refusedEarly(u) {
		return nil, info, fmt.Errorf("%s: %w", op, errForbidden)
	}
	client := f.client
	if f.exempted(u) {
		client = f.exempt
	}

	fctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return nil, info, fmt.Errorf("%s: %w", op, errInvalid)
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "*/*")
	resp, err := client.Do(req)
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
