package store

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

// crockford is the lower-case Crockford base32 alphabet of sortable ids.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// newID returns prefix followed by 26 characters: 48 bits of milliseconds since the
// epoch then 80 random bits, in base32, so ids sort by creation time.
func newID(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	rand.Read(b[6:])
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	var sb strings.Builder
	sb.WriteString(prefix)
	for i := range 26 {
		// Character i holds the five bits from 5*(25-i) up, counted from the low end.
		shift := uint(5 * (25 - i))
		var v uint64
		switch {
		case shift >= 64:
			v = hi >> (shift - 64)
		case shift > 59:
			v = lo>>shift | hi<<(64-shift)
		default:
			v = lo >> shift
		}
		sb.WriteByte(crockford[v&31])
	}
	return sb.String()
}
