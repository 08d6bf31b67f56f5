package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
)

// net/http answers some malformed requests itself, before any handler
// runs (431 for oversized headers, 400 for a bad Content-Length or a
// missing Host, 501 for an unknown transfer coding), in plain text. The
// API promises problem+json for every answer, so the local server's
// connections rewrite those answers. They are recognized by their exact
// form: the status line followed by only these headers, which no handler
// answer has (the server adds Date to every one of those).
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

type problemConn struct{ net.Conn }

func (c problemConn) Write(p []byte) (int, error) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return c.Conn.Write(p)
	}
	i := bytes.Index(p, []byte("\r\n"))
	if i < len(proto)+3 || !bytes.HasPrefix(p[i:], []byte(plainErrorHeaders)) {
		return c.Conn.Write(p)
	}
	status, err := strconv.Atoi(string(p[len(proto) : len(proto)+3]))
	if err != nil || status < 400 {
		return c.Conn.Write(p)
	}
	code := "invalid_request"
	switch status {
	case http.StatusRequestEntityTooLarge:
		code = "payload_too_large"
	case http.StatusRequestHeaderFieldsTooLarge:
		code = "headers_too_large"
	}
	body, _ := json.Marshal(map[string]any{
		"type": "urn:otpguard:problem:" + code, "title": http.StatusText(status), "status": status,
		"detail": "the request is not valid HTTP: " + string(p[len(proto):i]), "code": code,
	})
	var b bytes.Buffer
	b.WriteString(proto + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	b.WriteString("Content-Type: application/problem+json\r\nCache-Control: no-store\r\nConnection: close\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
