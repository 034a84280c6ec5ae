package cache

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// Config is what a site's cache is told. Defaults are set in one place, withDefaults.
type Config struct {
	// Dir holds the cache: index.db, sha256/ (verified images) and partial/ (pulls in
	// progress). It is made when missing.
	Dir string
	// CapacityBytes bounds the bytes of ready, evicting and in-progress images together.
	// 0 is no bound. Whatever it says, a pull never writes into ReserveBytes.
	CapacityBytes int64
	// ReserveBytes is the free space of Dir's filesystem the cache leaves to everything
	// else on it (the site's leases, its logs): before a pull starts and at each write,
	// the room the cache has is at most the filesystem's free space less this. 0 is the
	// default, DefaultReserve of the filesystem's size; it must be less than that size.
	ReserveBytes int64
	// MaxPulls is how many pulls (and start-up verifications) run at once. Default 2.
	MaxPulls int
	// BandwidthBytesPerSec bounds the bytes per second all pulls take together. 0 is no
	// bound.
	BandwidthBytesPerSec int64
	// RootCAs is the pool sources' TLS certificates must chain to; nil is the system's.
	RootCAs *x509.CertPool
	// Reporter is told the `images` inventory section whenever it changes. Nil tells no one.
	Reporter Reporter
	// SpaceMoved is told that the room on Dir's filesystem may have moved: a pull ended
	// ready or failed for capacity (the filesystem filled, by the pull or by other files
	// beside it), or an eviction freed a file. It is called on the goroutine that tells
	// the Reporter, before the Reporter hears of the same change, with no lock held (it
	// may call Capacity); a burst of such changes is told once. Nil tells no one.
	SpaceMoved func()
	// RetryInterval is how long a failed image that is still desired waits before it is
	// pulled again. Default 5 minutes.
	RetryInterval time.Duration
	// Attempts is how many requests in a row may fail without a byte of progress before a
	// pull fails. A connection that breaks after some progress is resumed at once and does
	// not count. Default 3.
	Attempts int
	// StallTimeout ends a request that delivered no byte for this long (it is then resumed
	// like a broken one). Default 60 seconds.
	StallTimeout time.Duration
	// MinReadBytesPerSec is the slowest rate a reader of an image is waited for: the
	// responses streaming an image keep it from eviction for as long as a reader at this
	// rate takes to read it whole, plus ReadGrace, from the start of their run (reads
	// that follow one another within ReadGrace are one run); past that, eviction may cut
	// them and take the image. Default 1 MiB/s.
	MinReadBytesPerSec int64
	// ReadGrace is added to the time a reader at MinReadBytesPerSec needs, and is how
	// long an image must go unread before a read starts a new run. Default 10 minutes.
	ReadGrace time.Duration
	// Clock is the time of last use, failure retries and the bandwidth bound. Default the
	// system's.
	Clock clock.Clock
	// Logger gets one line per pull, verification, failure and eviction. Default discards.
	Logger *slog.Logger
	// Observer is told of image requests, pulls and evictions; nil tells no one.
	Observer Observer
}

// The defaults.
const (
	DefaultMaxPulls      = 2
	DefaultRetryInterval = 5 * time.Minute
	DefaultAttempts      = 3
	DefaultStallTimeout  = 60 * time.Second

	DefaultMinReadBytesPerSec = 1 << 20
	DefaultReadGrace          = 10 * time.Minute
)

// DefaultReserve is the reserve of a filesystem of total bytes when the config gives
// none: 5% of it, at least 1 GiB and at most 20 GiB, and never more than a quarter of it
// (so that a small filesystem still has room for images).
func DefaultReserve(total int64) int64 {
	return min(max(total/20, 1<<30), 20<<30, total/4)
}

func (c Config) withDefaults() Config {
	if c.MaxPulls <= 0 {
		c.MaxPulls = DefaultMaxPulls
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.MinReadBytesPerSec <= 0 {
		c.MinReadBytesPerSec = DefaultMinReadBytesPerSec
	}
	if c.ReadGrace <= 0 {
		c.ReadGrace = DefaultReadGrace
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// transport is the transport to sources: the configured CA pool, no proxy from the
// environment (a site reaches its sources directly), TLS 1.2 at least, and no
// transparent decompression (the digest is of the artifact as stored).
func (c Config) transport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: c.StallTimeout,
		MaxIdleConnsPerHost:   c.MaxPulls,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
	}
}
