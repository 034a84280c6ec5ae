package lease

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// TestDamagedLeaseFile: a lease file with a record that is not a lease fails the pool's
// start with ErrCorrupt, naming the file and the record and saying what to do.
func TestDamagedLeaseFile(t *testing.T) {
	for name, c := range map[string]struct{ key, value string }{
		"not JSON":          {"\x0a\x09\x00\x0a", "{"},
		"another schema":    {"\x0a\x09\x00\x0a", `{"schema":2,"record":{"mac":"aa","ip":"10.9.0.10","expiry":"2030-01-01T00:00:00Z"}}`},
		"no MAC":            {"\x0a\x09\x00\x0a", `{"schema":1,"record":{"ip":"10.9.0.10","expiry":"2030-01-01T00:00:00Z"}}`},
		"an IPv6 address":   {"\x0a\x09\x00\x0a", `{"schema":1,"record":{"mac":"aa","ip":"::1","expiry":"2030-01-01T00:00:00Z"}}`},
		"under another key": {"\x0a\x09\x00\x0b", `{"schema":1,"record":{"mac":"aa","ip":"10.9.0.10","expiry":"2030-01-01T00:00:00Z"}}`},
		"a bad address":     {"\x0a\x09\x00\x0a", `{"schema":1,"record":{"mac":"aa","ip":"10.9.0.300","expiry":"2030-01-01T00:00:00Z"}}`},
		"a bad expiry":      {"\x0a\x09\x00\x0a", `{"schema":1,"record":{"mac":"aa","ip":"10.9.0.10","expiry":"soon"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "leases.db")
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists(bucket)
				if err != nil {
					return err
				}
				return b.Put([]byte(c.key), []byte(c.value))
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err = NewPool(openStore(t, path), rng, nil, time.Hour, nil, Policy{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file aside") {
				t.Fatalf("pool on a damaged file: %v, want ErrCorrupt naming %s and what to do", err, path)
			}
		})
	}
}

// FuzzDecode reads any stored record under any key: a lease only when it is one of this
// schema with a MAC, stored under its IPv4 address; an error otherwise, never a panic.
func FuzzDecode(f *testing.F) {
	good, _ := encode(Lease{MAC: "02:00:00:00:00:01", IP: netip.MustParseAddr("10.9.0.10"), Expiry: time.Unix(2e9, 0).UTC(), Known: true})
	f.Add([]byte{10, 9, 0, 10}, good)
	f.Add([]byte{10, 9, 0, 11}, good)
	f.Add([]byte{10, 9, 0, 10}, []byte(`{"schema":1,"record":{"mac":"declined","ip":"10.9.0.10","expiry":"2030-01-01T00:00:00Z"}}`))
	f.Add([]byte{10, 9, 0, 10}, []byte(`{"schema":1,"record":{"mac":"aa","ip":"::ffff:10.9.0.10"}}`))
	f.Add([]byte{}, []byte(`{"schema":1}`))
	f.Add([]byte{10, 9, 0, 10}, []byte(`null`))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		l, err := decode(k, v)
		if err != nil {
			return
		}
		if !l.IP.Is4() || string(l.IP.AsSlice()) != string(k) || l.MAC == "" {
			t.Fatalf("decode(%x, %q) = %+v: not a lease stored under its address", k, v, l)
		}
		again, err := encode(l)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := decode(k, again); err != nil || back.MAC != l.MAC || back.IP != l.IP || !back.Expiry.Equal(l.Expiry) || back.Known != l.Known {
			t.Fatalf("lease %+v read back as %+v, %v", l, back, err)
		}
	})
}
