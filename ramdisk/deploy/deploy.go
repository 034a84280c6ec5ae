// Package deploy is the ramdisk's deploy.image: it streams an OS image from the site
// cache (or its source) onto the machine's disk in one pass, network to disk, checks
// the artifact's digest on the way, and installs the first-boot files into the OS it
// wrote. A disk whose write failed or whose image did not match is left unbootable.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/firstboot"
)

// Input is one deploy.image command.
type Input struct {
	// CacheURL is the image at the site cache, tried first; empty when the site holds
	// no copy.
	CacheURL string
	// SourceURL is the image's catalog source, the fallback: https:// or oci://; empty
	// when the registry does not let this machine fetch from it (the site's image
	// sources), so that only the cache is tried.
	SourceURL string
	// ImageSources is where the fetch from SourceURL may go: every request of it (its
	// redirects and token realms too) and every address it dials (fetch.Bound). Nil is
	// SourceURL's own host and port alone.
	ImageSources *proto.SourceBound
	// Digest is the SHA-256 of the artifact as stored, 64 lower-case hex digits.
	Digest string
	// Format is raw or qcow2.
	Format proto.ImageFormat
	// Compression is none, zstd or gzip.
	Compression proto.Compression
	// SizeBytes is the artifact's size as stored; 0 when unknown. A location that
	// announces another size is not used.
	SizeBytes int64
	// Target is the block device to write (a regular file in tests).
	Target string
	// FirstBoot is what goes into the written OS: the user-data document and bcd's
	// config.toml and join-encryption.jwk. Empty installs nothing and mounts nothing.
	FirstBoot firstboot.Files
}

// Progress is a snapshot of a running deploy, for the CLI's --wait view.
type Progress struct {
	// Location is "cache" or "source".
	Location string `json:"location"`
	// Total is the artifact's size as stored, or -1 when unknown.
	Total int64 `json:"total"`
	// Read is the artifact bytes received from the network.
	Read int64 `json:"read"`
	// Written is the bytes written to the disk; Skipped the zeros left out because
	// the disk reads zeros there.
	Written int64 `json:"written"`
	Skipped int64 `json:"skipped"`
}

// Options carry what the caller injects.
type Options struct {
	// Transport carries the requests (the source's through a copy of it, fetch.Bound's);
	// nil is one with no proxy, no overall timeout and no transparent decompression.
	Transport *http.Transport
	// Fetch tunes the HTTP streams (resumes, stall timeout).
	Fetch fetch.StreamOptions
	// Progress, if not nil, is called after every block written (every few MiB), from
	// one goroutine at a time; it must be quick.
	Progress func(Progress)
	// Log receives one line per location tried; nil discards.
	Log *slog.Logger
	// ZstdConcurrency is the zstd decoder's concurrency (0: the default of decode.go).
	ZstdConcurrency int
}

// Result is what a successful deploy.image reports.
type Result struct {
	// Location is where the image came from: "cache" or "source".
	Location string `json:"location"`
	// Digest is the artifact's SHA-256 as computed while it streamed.
	Digest string `json:"digest"`
	// ImageBytes is the length of the disk image written.
	ImageBytes int64 `json:"imageBytes"`
	// Read, Written and Skipped are the final counts (see Progress).
	Read    int64 `json:"read"`
	Written int64 `json:"written"`
	Skipped int64 `json:"skipped"`
	// Resumes is how many times a broken stream was picked up again.
	Resumes int `json:"resumes"`
	// ZeroesKnown says whether the disk read zeros before the write, so zero blocks
	// could be skipped.
	ZeroesKnown bool `json:"zeroesKnown"`
}

// Check refuses an input deploy.image cannot act on, with INVALID_INPUT.
func (in Input) Check() error {
	bad := func(path, format string, args ...any) error {
		return proto.Errorf(proto.InvalidInput, format, args...).WithPath(path)
	}
	switch {
	case in.CacheURL == "" && in.SourceURL == "":
		return bad("sourceUrl", "no location to stream the image from")
	case !proto.IsDigest(in.Digest):
		return bad("digest", "digest %q is not 64 lower-case hex digits", in.Digest)
	case in.Format != proto.FormatRaw && in.Format != proto.FormatQcow2:
		return bad("format", "format %q cannot be written to a disk; raw and qcow2 can", in.Format)
	case in.Compression != proto.CompressionNone && in.Compression != proto.CompressionZstd && in.Compression != proto.CompressionGzip:
		return bad("compression", "compression %q is not none, zstd or gzip", in.Compression)
	case in.SizeBytes < 0:
		return bad("sizeBytes", "sizeBytes %d is negative", in.SizeBytes)
	case in.Target == "":
		return bad("target", "no target disk")
	}
	return nil
}

// location is one place the image may be streamed from.
type location struct{ name, url string }

// Image runs deploy.image: the cache first, the source if the cache does not deliver
// (a 404, a connection that fails or breaks beyond resuming, or a digest mismatch), and
// the digest checked over every byte before success is reported.
func Image(ctx context.Context, in Input, opts Options) (Result, error) {
	if err := in.Check(); err != nil {
		return Result{}, err
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	t, err := disk.Open(in.Target)
	if err != nil {
		return Result{}, proto.Errorf(proto.DriverError, "open the target disk: %w", err).WithReason(proto.ReasonDiskWrite)
	}
	defer t.Close()
	var locs []location
	for _, l := range []location{{proto.DeployFromCache, in.CacheURL}, {proto.DeployFromSource, in.SourceURL}} {
		if l.url != "" {
			locs = append(locs, l)
		}
	}
	var hc *http.Client
	if opts.Transport != nil {
		hc = &http.Client{Transport: opts.Transport}
	}
	w := writing{in: in, opts: opts, target: t, cache: fetch.NewClient(hc), source: fetch.NewBoundClient(opts.Transport, in.bound())}
	// Each client has a transport of its own: no connection stays open after the deploy.
	defer w.cache.CloseIdleConnections()
	defer w.source.CloseIdleConnections()
	res, err := w.firstThatDelivers(ctx, locs)
	if err == nil {
		err = install(t, in.FirstBoot)
	}
	if err == nil {
		return res, nil
	}
	if w.touched {
		if werr := t.Wipe(); werr != nil {
			e := *proto.AsError(err)
			e.Message += fmt.Sprintf("; wiping the disk afterwards failed too: %v", werr)
			err = &e
		}
	}
	return Result{}, err
}

// bound is where the fetch from the source may go: ImageSources, else the source's own
// host and port.
func (in Input) bound() fetch.Bound {
	if in.ImageSources != nil {
		return fetch.Bound{Sources: *in.ImageSources}
	}
	var own []string
	if u, err := url.Parse(in.SourceURL); err == nil && u.Hostname() != "" {
		own = []string{net.JoinHostPort(proto.URLHostPort(u))}
	}
	return fetch.Bound{Sources: proto.SourceBound{Site: own}}
}

// writing is one deploy.image onto one target.
type writing struct {
	in   Input
	opts Options
	// cache fetches the site cache's copy, at the address the registry gave; source the
	// image's source, within in's bound.
	cache, source *fetch.Client
	target        *disk.Target
	// touched is set once the target has been changed.
	touched bool
}

func (w *writing) firstThatDelivers(ctx context.Context, locs []location) (Result, error) {
	var failures []error
	for _, loc := range locs {
		if err := ctx.Err(); err != nil {
			return Result{}, proto.Errorf(proto.Timeout, "deploy.image: %w", err)
		}
		res, err := w.attempt(ctx, loc)
		if err == nil {
			res.Location = loc.name
			w.opts.Log.Info("image written", "location", loc.name, "digest", res.Digest, "written", res.Written, "skipped", res.Skipped)
			return res, nil
		}
		var next *nextLocation
		if !errors.As(err, &next) {
			return Result{}, err
		}
		if err := ctx.Err(); err != nil {
			return Result{}, proto.Errorf(proto.Timeout, "deploy.image: %w", err)
		}
		w.opts.Log.Warn("image location failed", "location", loc.name, "url", fetch.Redact(loc.url), "err", next.err)
		failures = append(failures, fmt.Errorf("%s: %w", loc.name, next.err))
	}
	code, reason := proto.DriverError, proto.ReasonImageUnavailable
	switch last := failures[len(failures)-1]; {
	case errors.Is(last, errDigest):
		reason = proto.ReasonDigestMismatch
	case errors.Is(last, errTooLarge):
		reason = proto.ReasonDiskWrite
	case errors.Is(last, fetch.ErrNotAllowed):
		// The source sent the fetch where the machine may not go: the same refusal as the
		// registry's of a source the site does not allow.
		code, reason = proto.Forbidden, proto.ReasonSourceNotAllowed
	}
	return Result{}, proto.Errorf(code, "%w", errors.Join(failures...)).WithReason(reason)
}

// nextLocation marks a failure that the next location may not have.
type nextLocation struct{ err error }

func (e *nextLocation) Error() string { return e.err.Error() }
func (e *nextLocation) Unwrap() error { return e.err }

// errDigest marks a digest mismatch.
var errDigest = errors.New("digest mismatch")

// install puts the first-boot files into the OS just written.
func install(t *disk.Target, files firstboot.Files) error {
	if files.Empty() {
		return nil
	}
	sector, err := t.SectorSize()
	if err == nil {
		err = firstboot.Install(t.File(), sector, files)
	}
	if errors.Is(err, firstboot.ErrUnsupported) {
		return proto.Errorf(proto.Unsupported, "installing the user data: %w", err).WithReason(proto.ReasonFirstBoot)
	}
	if err != nil {
		return proto.Errorf(proto.DriverError, "installing the user data: %w", err).WithReason(proto.ReasonFirstBoot)
	}
	return nil
}
