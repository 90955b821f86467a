package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// statementProxy forwards TCP connections to PostgreSQL and counts the statements the clients
// send: simple-protocol queries ('Q' messages, e.g. BEGIN and COMMIT) and extended-protocol
// executions ('E' messages), each one round trip as pgx sends them outside a batch. The
// assemblies' pools are made by the wire injector, which takes no pgx tracer, so the count is
// taken on the wire. The proxied URL has sslmode=disable: the proxy cannot read TLS.
type statementProxy struct {
	// url is the database URL to give the service: the proxy's address in place of the
	// server's.
	url    string
	target string
	ln     net.Listener
	n      atomic.Int64
	wg     sync.WaitGroup
}

// newStatementProxy starts a proxy to the server of databaseURL on a loopback port.
func newStatementProxy(databaseURL string) (*statementProxy, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, errors.New("statement proxy: bad database URL (details withheld)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &statementProxy{target: u.Host, ln: ln}
	q := u.Query()
	q.Set("sslmode", "disable")
	u.Host, u.RawQuery = ln.Addr().String(), q.Encode()
	p.url = u.String()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// count returns the statements counted so far; 0 on a nil proxy.
func (p *statementProxy) count() int64 {
	if p == nil {
		return 0
	}
	return p.n.Load()
}

// close stops accepting and waits for the open connections' client sides to end (the
// service closes its pools before).
func (p *statementProxy) close() {
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *statementProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(client)
		}()
	}
}

// pipe forwards one connection: the server's side as it is, the client's side message by
// message, counting.
func (p *statementProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(client, server)
		_ = client.Close()
	}()
	_ = p.forward(bufio.NewReader(client), bufio.NewWriter(server))
}

// forward copies the client's messages to w until an error, counting 'Q' and 'E'. The
// startup phase has untyped messages (length, then a code): an SSLRequest or GSSENCRequest
// (refused, as sslmode=disable sends none) is followed by the startup message.
func (p *statementProxy) forward(r *bufio.Reader, w *bufio.Writer) error {
	const sslRequest, gssEncRequest = 80877103, 80877104
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		if err := copyMessage(r, w, hdr[:], binary.BigEndian.Uint32(hdr[:4])); err != nil {
			return err
		}
		if code := binary.BigEndian.Uint32(hdr[4:]); code != sslRequest && code != gssEncRequest {
			break
		}
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		if hdr[0] == 'Q' || hdr[0] == 'E' {
			p.n.Add(1)
		}
		// The length counts itself (4 bytes) but not the type byte.
		if err := copyMessage(r, w, hdr[:], binary.BigEndian.Uint32(hdr[1:])+1); err != nil {
			return err
		}
	}
}

// copyMessage writes the header already read and the rest of a message of size bytes
// (header included), and flushes when the client has nothing more buffered.
func copyMessage(r *bufio.Reader, w *bufio.Writer, hdr []byte, size uint32) error {
	if int(size) < len(hdr) {
		return errors.New("statement proxy: malformed message")
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(w, r, int64(size)-int64(len(hdr))); err != nil {
		return err
	}
	if r.Buffered() == 0 {
		return w.Flush()
	}
	return nil
}
