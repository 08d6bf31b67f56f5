// Package asndb reads the autonomous system of an address from a
// MaxMind-format ASN database (GeoLite2-ASN, DB-IP ASN Lite): the asn
// dimension's guard.Networks. The operator provides the file
// (network.asnDatabase); nothing is downloaded. It is memory-mapped, so
// the functions share it with the page cache rather than each holding a
// copy, and read-only: safe for concurrent lookups.
package asndb

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/oschwald/maxminddb-golang/v2"
)

// DB is an open ASN database.
type DB struct {
	r    *maxminddb.Reader
	path string
}

// record is the part of a GeoLite2-ASN record the guard reads (DB-IP's
// ASN Lite has the same field).
type record struct {
	ASN uint32 `maxminddb:"autonomous_system_number"`
}

// Open opens the database at path. It refuses a file that is not a
// MaxMind-format database, or whose type is not an ASN database (a
// GeoLite2-City file would answer no AS number for any address, silently
// turning every asn rule into an ip/16 one).
func Open(path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("asndb: no path")
	}
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("asndb: open %s: %w", path, err)
	}
	if t := r.Metadata.DatabaseType; !strings.Contains(strings.ToUpper(t), "ASN") {
		_ = r.Close()
		return nil, fmt.Errorf("asndb: %s is a %q database, not an ASN one (GeoLite2-ASN or DB-IP ASN Lite)", path, t)
	}
	return &DB{r: r, path: path}, nil
}

// ASN implements guard.Networks.
func (d *DB) ASN(a netip.Addr) (uint32, bool) {
	res := d.r.Lookup(a.Unmap())
	if !res.Found() {
		return 0, false
	}
	var rec record
	if err := res.Decode(&rec); err != nil || rec.ASN == 0 {
		return 0, false
	}
	return rec.ASN, true
}

// Path is the file the database was opened from.
func (d *DB) Path() string { return d.path }

// Close unmaps the file.
func (d *DB) Close() error { return d.r.Close() }
