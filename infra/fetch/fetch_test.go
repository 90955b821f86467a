package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listingkit/listing/app/port"
)

// dialLog records every address that passed the dial-time check; a test fails when a
// non-loopback address ever gets that far (so no test sends a packet off this machine).
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (d *dialLog) hook(t *testing.T) func(network, address string) {
	return func(network, address string) {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			t.Errorf("dial reached connect for non-loopback %s", address)
		}
		d.mu.Lock()
		d.addrs = append(d.addrs, address)
		d.mu.Unlock()
	}
}

func (d *dialLog) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.addrs)
}

type mapResolver struct {
	calls atomic.Int32
	f     func(call int32, host string) ([]netip.Addr, error)
}

func (m *mapResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	return m.f(m.calls.Add(1), host)
}

func newFetcher(t *testing.T, cfg Config) (*Fetcher, *dialLog) {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dl := &dialLog{}
	f.afterCheck = dl.hook(t)
	return f, dl
}

func okServer(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// registryRows lists every row of the IANA IPv4 and IPv6 special-purpose address registries
// (as of 2025-05) and the extra prefixes, with the guard's expected verdict for an address in
// the row: "refuse", "allow", or for the rows that carry an IPv4 address the verdict for a
// public and a loopback one inside (sample addresses given).
var registryRows = []struct {
	prefix  string
	samples map[string]bool // address → allowed
}{
	// IPv4 special-purpose registry
	{"0.0.0.0/8", m("0.1.2.3", false, "0.255.255.255", false)},
	{"0.0.0.0/32", m("0.0.0.0", false)},
	{"10.0.0.0/8", m("10.0.0.1", false, "10.255.255.255", false)},
	{"100.64.0.0/10", m("100.64.0.1", false, "100.127.255.254", false)},
	{"127.0.0.0/8", m("127.0.0.1", false, "127.1.2.3", false)},
	{"169.254.0.0/16", m("169.254.169.254", false, "169.254.0.1", false)},
	{"172.16.0.0/12", m("172.16.0.1", false, "172.31.255.255", false)},
	{"192.0.0.0/24", m("192.0.0.1", false, "192.0.0.255", false)},
	{"192.0.0.0/29", m("192.0.0.0", false, "192.0.0.7", false)},
	{"192.0.0.8/32", m("192.0.0.8", false)},
	{"192.0.0.9/32", m("192.0.0.9", false)},   // registry: globally reachable; refused with its /24
	{"192.0.0.10/32", m("192.0.0.10", false)}, // idem
	{"192.0.0.170/32", m("192.0.0.170", false)},
	{"192.0.0.171/32", m("192.0.0.171", false)},
	{"192.0.2.0/24", m("192.0.2.1", false)},
	{"192.31.196.0/24", m("192.31.196.1", true)},
	{"192.52.193.0/24", m("192.52.193.1", true)},
	{"192.88.99.0/24", m("192.88.99.1", false)},
	{"192.168.0.0/16", m("192.168.1.1", false)},
	{"192.175.48.0/24", m("192.175.48.1", true)},
	{"198.18.0.0/15", m("198.18.0.1", false, "198.19.255.255", false)},
	{"198.51.100.0/24", m("198.51.100.7", false)},
	{"203.0.113.0/24", m("203.0.113.9", false)},
	{"240.0.0.0/4", m("240.0.0.1", false, "255.255.255.254", false)},
	{"255.255.255.255/32", m("255.255.255.255", false)},
	// IPv6 special-purpose registry
	{"::1/128", m("::1", false)},
	{"::/128", m("::", false)},
	{"::ffff:0:0/96", m("::ffff:8.8.8.8", true, "::ffff:127.0.0.1", false, "::ffff:169.254.169.254", false, "::ffff:10.0.0.1", false)},
	{"64:ff9b::/96", m("64:ff9b::808:808", true, "64:ff9b::7f00:1", false, "64:ff9b::a9fe:a9fe", false, "64:ff9b::a00:1", false)},
	{"64:ff9b:1::/48", m("64:ff9b:1::808:808", false)},
	{"100::/64", m("100::1", false)},
	{"100:0:0:1::/64", m("100:0:0:1::1", false)},
	{"2001::/23", m("2001:5::1", false, "2001:1ff:ffff::1", false)},
	{"2001::/32", m("2001:0:4136:e378:8000:63bf:3fff:fdd2", false, "2001::808:808", false)},
	{"2001:1::1/128", m("2001:1::1", true)},
	{"2001:1::2/128", m("2001:1::2", true)},
	{"2001:1::3/128", m("2001:1::3", true)},
	{"2001:2::/48", m("2001:2::1", false)},
	{"2001:3::/32", m("2001:3::1", true)},
	{"2001:4:112::/48", m("2001:4:112::1", true)},
	{"2001:10::/28", m("2001:10::1", false)},
	{"2001:20::/28", m("2001:20::1", true)},
	{"2001:30::/28", m("2001:30::1", true)},
	{"2001:db8::/32", m("2001:db8::1", false)},
	{"2002::/16", m("2002:808:808::1", true, "2002:7f00:1::1", false, "2002:a00:1::", false)},
	{"2620:4f:8000::/48", m("2620:4f:8000::1", true)},
	{"3fff::/20", m("3fff::1", false, "3fff:fff::1", false)},
	{"5f00::/16", m("5f00::1", false)},
	{"fc00::/7", m("fc00::1", false, "fd12:3456::1", false)},
	{"fe80::/10", m("fe80::1", false)},
	// extra: not in the special-purpose registries
	{"224.0.0.0/4", m("224.0.0.1", false, "239.255.255.250", false)},
	{"::ffff:0:0:0/96", m("::ffff:0:7f00:1", false, "::ffff:0:a9fe:a9fe", false, "::ffff:0:a00:1", false, "::ffff:0:808:808", false)},
	{"::/96", m("::127.0.0.1", false, "::8.8.8.8", false)},
	{"fec0::/10", m("fec0::1", false)},
	{"ff00::/8", m("ff02::1", false)},
}

func m(kv ...any) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1].(bool)
	}
	return out
}

func TestAddressClassesCoverEveryRegistryRow(t *testing.T) {
	listed := map[netip.Prefix]bool{}
	for _, r := range registryRows {
		pfx := netip.MustParsePrefix(r.prefix)
		listed[pfx] = true
		for s, want := range r.samples {
			a := netip.MustParseAddr(s)
			if !pfx.Contains(a) {
				t.Fatalf("test row %s: sample %s outside", r.prefix, s)
			}
			if got := Allowed(a); got != want {
				t.Errorf("%s (row %s): allowed = %v, want %v", s, r.prefix, got, want)
			}
		}
	}
	for _, c := range classes {
		if !listed[c.prefix] {
			t.Errorf("class %s (%s) has no test row", c.prefix, c.name)
		}
	}
	if len(listed) != len(classes) {
		t.Errorf("%d test rows, %d classes", len(listed), len(classes))
	}
}

func TestAddressClassesOutsideTheRegistries(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "93.184.216.34": true, "172.32.0.1": true, "100.128.0.1": true,
		"192.0.1.1": true, "2606:4700:4700::1111": true, "2a00:1450:4001::200e": true, "2001:200::1": true,
		"4000::1": false, "1::1": false, "::2:1": false, "::ffff:1:0:0": false, // IPv6 outside 2000::/3
	} {
		if got := Allowed(netip.MustParseAddr(s)); got != want {
			t.Errorf("%s: allowed = %v, want %v", s, got, want)
		}
	}
	zoned, _ := netip.ParseAddr("fe80::1%eth0")
	if Allowed(zoned) || Allowed(netip.Addr{}) {
		t.Error("zoned or invalid address allowed")
	}
	if forbidden(netip.MustParseAddr("127.0.0.1"), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}) {
		t.Error("AllowNetworks exception ignored")
	}
}

func TestRefusesPrivateTargets(t *testing.T) {
	srv := okServer(t, "hello")
	port6 := srv.Listener.Addr().(*net.TCPAddr).Port
	f, dl := newFetcher(t, Config{})
	ctx := context.Background()
	urls := []string{
		srv.URL, // 127.0.0.1
		fmt.Sprintf("http://localhost:%d/", port6),
		"http://10.0.0.1/x",
		"http://10.1.2.3:8080/x",
		"http://169.254.169.254/latest/meta-data/",
		fmt.Sprintf("http://[::1]:%d/", port6),
		fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", port6),
		"http://[::ffff:a9fe:a9fe]/",
		"http://0.0.0.0/",
		"http://100.64.0.1/",
		"http://192.168.0.1/",
		"http://[fe80::1]/",
		"http://[64:ff9b::a00:1]/",
		"https://172.16.0.1/",
		fmt.Sprintf("http://[::ffff:0:127.0.0.1]:%d/x", port6), // IPv4-translated
		"http://[::ffff:0:a9fe:a9fe]/",
		"http://[::ffff:0:a00:1]/",
		"http://LocalHost./",
		"http://app.localhost/",
	}
	for _, u := range urls {
		if err := f.CheckURL(ctx, u); !errors.Is(err, port.ErrSourceURLForbidden) {
			t.Errorf("CheckURL(%s) = %v, want SOURCE_URL_FORBIDDEN", u, err)
		}
		rc, _, err := f.Fetch(ctx, u, 1<<20)
		if rc != nil {
			rc.Close()
		}
		if !errors.Is(err, port.ErrSourceURLForbidden) {
			t.Errorf("Fetch(%s) = %v, want SOURCE_URL_FORBIDDEN", u, err)
		}
	}
	if dl.count() != 0 {
		t.Fatalf("connections attempted: %v", dl.addrs)
	}
}

func TestHostnameResolvingToLoopbackAndRebinding(t *testing.T) {
	srv := okServer(t, "hello")
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	ctx := context.Background()

	loop := &mapResolver{f: func(int32, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1")}, nil
	}}
	f, dl := newFetcher(t, Config{Resolver: loop})
	// The check of a request resolves nothing: names are checked where the connection is made.
	if err := f.CheckURL(ctx, "http://mixed.test:"+portStr+"/"); err != nil {
		t.Fatalf("CheckURL of a name: %v", err)
	}
	if n := loop.calls.Load(); n != 0 {
		t.Fatalf("CheckURL resolved %d times", n)
	}
	if _, _, err := f.Fetch(ctx, "http://mixed.test:"+portStr+"/", 100); !errors.Is(err, port.ErrSourceURLForbidden) {
		t.Fatalf("mixed records: %v", err)
	}

	// DNS rebinding: public at the first lookup, loopback at the next.
	rebind := &mapResolver{f: func(call int32, _ string) ([]netip.Addr, error) {
		if call == 1 {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}}
	f2, dl2 := newFetcher(t, Config{Resolver: rebind})
	u := "http://rebind.test:" + portStr + "/"
	if _, err := f2.resolve(ctx, "rebind.test"); err != nil {
		t.Fatalf("first lookup is public: %v", err)
	}
	if _, _, err := f2.Fetch(ctx, u, 100); !errors.Is(err, port.ErrSourceURLForbidden) {
		t.Fatalf("rebinding: %v", err)
	}
	if dl.count()+dl2.count() != 0 {
		t.Fatal("connections attempted")
	}

	nx := &mapResolver{f: func(int32, string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "nx.test", IsNotFound: true}
	}}
	f3, _ := newFetcher(t, Config{Resolver: nx})
	if err := f3.CheckURL(ctx, "http://nx.test/"); err != nil {
		t.Fatalf("CheckURL of an unknown name: %v", err)
	}
	if _, _, err := f3.Fetch(ctx, "http://nx.test/", 100); !errors.Is(err, port.ErrSourceURLInvalid) {
		t.Fatalf("nxdomain: %v", err)
	}
}

func TestDialTimeControl(t *testing.T) {
	f, _ := newFetcher(t, Config{})
	for _, a := range []string{"127.0.0.1:80", "[::1]:443", "[::ffff:127.0.0.1]:80", "10.0.0.1:80", "169.254.169.254:80", "garbage",
		"[::ffff:0:7f00:1]:80", "[::ffff:0:a9fe:a9fe]:80", "[::ffff:0:a00:1]:80"} {
		if err := f.control("tcp", a, nil); !errors.Is(err, port.ErrSourceURLForbidden) {
			t.Errorf("control(%s) = %v", a, err)
		}
	}
	f.afterCheck = nil // control is called directly here: nothing connects
	if err := f.control("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("public address refused: %v", err)
	}
	// even when the pre-dial resolution is bypassed, the dialer refuses before connect
	for _, a := range []string{"127.0.0.1:9", "[::ffff:0:127.0.0.1]:9"} {
		if _, err := f.dialer.DialContext(context.Background(), "tcp", a); !errors.Is(err, port.ErrSourceURLForbidden) {
			t.Errorf("dialer without guard, %s: %v", a, err)
		}
	}
	// a name resolving to an IPv4-translated address is refused where the connection is made
	tr, _ := newFetcher(t, Config{Resolver: &mapResolver{f: func(int32, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("::ffff:0:7f00:1")}, nil
	}}})
	if _, _, err := tr.Fetch(context.Background(), "http://translated.test/", 100); !errors.Is(err, port.ErrSourceURLForbidden) {
		t.Errorf("name resolving to ::ffff:0:7f00:1: %v", err)
	}
}

func TestInvalidURLs(t *testing.T) {
	f, dl := newFetcher(t, Config{AllowPrivate: true})
	for _, u := range []string{"", "not a url", "ftp://example.com/x", "file:///etc/passwd", "gopher://x/",
		"//example.com/x", "http://", "http:///x", "http://user:pw@example.com/", "javascript:alert(1)", "http:example.com"} {
		if err := f.CheckURL(context.Background(), u); !errors.Is(err, port.ErrSourceURLInvalid) {
			t.Errorf("CheckURL(%q) = %v", u, err)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error quotes user info: %v", err)
		}
		if _, _, err := f.Fetch(context.Background(), u, 10); !errors.Is(err, port.ErrSourceURLInvalid) {
			t.Errorf("Fetch(%q) = %v", u, err)
		}
	}
	if dl.count() != 0 {
		t.Fatal("connections attempted")
	}
}

func TestAllowPrivateFetches(t *testing.T) {
	srv := okServer(t, "hello world")
	f, dl := newFetcher(t, Config{AllowPrivate: true})
	rc, info, err := f.Fetch(context.Background(), srv.URL+"/img.png?sig=secret", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil || string(b) != "hello world" {
		t.Fatalf("body %q %v", b, err)
	}
	if info.ContentType != "image/png" || info.Size != 11 || !strings.HasPrefix(info.FinalURL, srv.URL) {
		t.Fatalf("info %+v", info)
	}
	if dl.count() != 1 {
		t.Fatalf("dials %d", dl.count())
	}
	if err := f.CheckURL(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
}

func TestRedirects(t *testing.T) {
	var target string
	mux := http.NewServeMux()
	mux.HandleFunc("/to-private", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/to-loopback-name", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusFound)
	})
	mux.HandleFunc("/to-ftp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://example.com/x", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "done") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	target = "http://localhost:" + portStr + "/final" // a name that resolves to loopback

	// The test server itself is loopback: allow exactly 127.0.0.1 so the first hop is fetched,
	// while every other private address stays refused.
	f, _ := newFetcher(t, Config{AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, MaxRedirects: 3,
		Resolver: &mapResolver{f: func(int32, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		}}})
	ctx := context.Background()
	cases := map[string]error{
		"/to-private":       port.ErrSourceURLForbidden,
		"/to-loopback-name": port.ErrSourceURLForbidden,
		"/to-ftp":           port.ErrSourceURLInvalid,
		"/loop":             port.ErrSourceRejected,
	}
	for path, want := range cases {
		_, _, err := f.Fetch(ctx, srv.URL+path, 100)
		if !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", path, err, want)
		}
	}
	rc, info, err := f.Fetch(ctx, srv.URL+"/hop", 100)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if info.FinalURL != srv.URL+"/final" {
		t.Fatalf("final url %s", info.FinalURL)
	}
}

func TestMaxBytes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 10; i++ {
			_, _ = io.WriteString(w, strings.Repeat("y", 100))
			w.(http.Flusher).Flush()
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f, _ := newFetcher(t, Config{AllowPrivate: true})
	ctx := context.Background()

	if _, _, err := f.Fetch(ctx, srv.URL+"/declared", 999); !errors.Is(err, port.ErrSourceTooLarge) {
		t.Fatalf("declared: %v", err)
	}
	rc, info, err := f.Fetch(ctx, srv.URL+"/chunked", 999)
	if err != nil || info.Size != -1 {
		t.Fatalf("chunked open: %v %+v", err, info)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if !errors.Is(err, port.ErrSourceTooLarge) || n > 999 {
		t.Fatalf("chunked: n=%d err=%v", n, err)
	}
	for _, path := range []string{"/declared", "/chunked"} {
		rc, _, err := f.Fetch(ctx, srv.URL+path, 1000)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != 1000 {
			t.Fatalf("%s exact limit: n=%d err=%v", path, n, err)
		}
	}
}

func TestTimeoutAndStatuses(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow-body", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "start")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/slow-headers", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/404", http.NotFound)
	mux.HandleFunc("/503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	f, _ := newFetcher(t, Config{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	ctx := context.Background()

	start := time.Now()
	if _, _, err := f.Fetch(ctx, srv.URL+"/slow-headers", 100); !errors.Is(err, port.ErrSourceUnreachable) {
		t.Fatalf("slow headers: %v", err)
	}
	rc, _, err := f.Fetch(ctx, srv.URL+"/slow-body", 100)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, port.ErrSourceUnreachable) {
		t.Fatalf("slow body: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("time limit not enforced: %s", time.Since(start))
	}
	if _, _, err := f.Fetch(ctx, srv.URL+"/404", 100); !errors.Is(err, port.ErrSourceRejected) || !port.IsPermanent(err) {
		t.Fatalf("404: %v", err)
	}
	if _, _, err := f.Fetch(ctx, srv.URL+"/503", 100); !errors.Is(err, port.ErrSourceUnreachable) || port.IsPermanent(err) {
		t.Fatalf("503: %v", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	u := closed.URL
	closed.Close()
	if _, _, err := f.Fetch(ctx, u, 100); !errors.Is(err, port.ErrSourceUnreachable) {
		t.Fatalf("refused: %v", err)
	}
}

func TestAllowURLPrefixes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "sample") })
	mux.HandleFunc("/files/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/secret", http.StatusFound)
	})
	mux.HandleFunc("/files/next", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/files/final", http.StatusFound)
	})
	mux.HandleFunc("/secret", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "secret") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := New(Config{AllowURLPrefixes: []string{"ftp://x/"}}); err == nil {
		t.Fatal("ftp prefix accepted")
	}
	if _, err := New(Config{AllowURLPrefixes: []string{srv.URL + "/files/?q=1"}}); err == nil {
		t.Fatal("prefix with a query accepted")
	}
	f, dl := newFetcher(t, Config{AllowURLPrefixes: []string{srv.URL + "/files/"}})
	ctx := context.Background()
	for _, u := range []string{srv.URL + "/files/mug.png", srv.URL + "/files/next"} {
		if err := f.CheckURL(ctx, u); err != nil {
			t.Fatalf("CheckURL(%s): %v", u, err)
		}
		rc, _, err := f.Fetch(ctx, u, 100)
		if err != nil {
			t.Fatalf("Fetch(%s): %v", u, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "sample" {
			t.Fatalf("Fetch(%s) = %q", u, b)
		}
	}
	for u, want := range map[string]error{
		srv.URL + "/secret":          port.ErrSourceURLForbidden, // same host, outside the prefix
		srv.URL + "/files/../secret": port.ErrSourceURLForbidden,
		srv.URL + "/files/away":      port.ErrSourceURLForbidden, // redirect out of the prefix
		strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/files/x": port.ErrSourceURLForbidden,
	} {
		rc, _, err := f.Fetch(ctx, u, 100)
		if rc != nil {
			rc.Close()
		}
		if !errors.Is(err, want) {
			t.Errorf("Fetch(%s) = %v, want %v", u, err, want)
		}
	}
	if dl.count() == 0 {
		t.Fatal("the exempt fetches connected through no checked dialer")
	}
}
