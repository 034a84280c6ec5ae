package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/qcow2"
)

// attempt streams the image from one location onto the disk. A failure the next
// location may not have is a *nextLocation; any other ends the deploy.
func (w *writing) attempt(ctx context.Context, loc location) (Result, error) {
	src, err := fetch.Location(loc.url)
	if err != nil {
		return Result{}, &nextLocation{err}
	}
	client := w.cache
	if loc.name == proto.DeployFromSource {
		client = w.source
	}
	body, err := client.Stream(ctx, src, 0, "", w.opts.Fetch)
	if err != nil {
		return Result{}, &nextLocation{err}
	}
	defer body.Close()
	total := body.Size()
	if w.in.SizeBytes > 0 {
		if total >= 0 && total != w.in.SizeBytes {
			return Result{}, &nextLocation{fmt.Errorf("%w: %d bytes served, the catalog says %d", errDigest, total, w.in.SizeBytes)}
		}
		total = w.in.SizeBytes
	}

	zeroesKnown, err := w.target.Reset(ctx)
	w.touched = true
	if err != nil {
		return Result{}, diskError(err)
	}
	var artifact io.Reader = body
	if w.in.SizeBytes > 0 {
		artifact = &sized{r: artifact, left: w.in.SizeBytes, past: errDigest, what: "the catalog's size"}
	}
	if c := w.target.Capacity(); c >= 0 {
		artifact = &sized{r: artifact, left: maxArtifact(c), past: errTooLarge, what: "the disk could hold"}
	}
	stream := newHashedStream(artifact)
	defer func() {
		body.Abort() // the reading goroutine may be inside body.Read
		stream.Close()
	}()
	var progress func(disk.Counts)
	if w.opts.Progress != nil {
		progress = func(c disk.Counts) {
			w.opts.Progress(Progress{Location: loc.name, Total: total, Read: stream.BytesRead(), Written: c.Written, Skipped: c.Skipped})
		}
	}
	out := disk.NewWriter(w.target, zeroesKnown, progress)
	length, ferr := w.decode(ctx, stream, out, w.target.Capacity())
	werr := out.Close()
	switch {
	case werr != nil:
		return Result{}, diskError(werr)
	case stream.Err() != nil:
		return Result{}, &nextLocation{stream.Err()}
	case errors.Is(ferr, qcow2.ErrUnsupported):
		return Result{}, proto.Errorf(proto.Unsupported, "%w", ferr)
	case errors.Is(ferr, context.Canceled), errors.Is(ferr, context.DeadlineExceeded):
		return Result{}, proto.Errorf(proto.Timeout, "deploy.image: %w", ferr)
	case errors.Is(ferr, errTooLarge):
		return Result{}, diskError(ferr)
	}
	// What the decoder left unread is part of the artifact, and of its digest.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return Result{}, &nextLocation{err}
	}
	if sum := stream.Sum(); sum != w.in.Digest {
		return Result{}, &nextLocation{fmt.Errorf("%w: the artifact's sha256 is %s, the catalog's %s", errDigest, sum, w.in.Digest)}
	}
	if ferr != nil {
		return Result{}, proto.Errorf(proto.DriverError, "the image matches its digest but is not valid %s/%s: %w",
			w.in.Format, w.in.Compression, ferr).WithReason(proto.ReasonImageCorrupt)
	}
	if err := w.target.Finish(length); err != nil {
		return Result{}, diskError(err)
	}
	c := out.Counts()
	return Result{Digest: w.in.Digest, ImageBytes: length, Read: stream.BytesRead(), Written: c.Written,
		Skipped: c.Skipped, Resumes: body.Resumes(), ZeroesKnown: zeroesKnown}, nil
}

func diskError(err error) error {
	return proto.Errorf(proto.DriverError, "writing the disk: %w", err).WithReason(proto.ReasonDiskWrite)
}

// sized is an artifact of at most left bytes: a byte past them fails the stream with
// past. A location that sends no length, or resumes without one, is otherwise read for as
// long as it sends, and the digest that would refuse it is known only at its end: the
// catalog's size makes a longer artifact another one (errDigest), and a disk's capacity
// one of no image that fits (errTooLarge).
type sized struct {
	r    io.Reader
	left int64
	past error
	what string
}

func (s *sized) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.left -= int64(n); s.left < 0 {
		return n, fmt.Errorf("%w: more bytes served than %s", s.past, s.what)
	}
	return n, err
}

// maxArtifact is the most an artifact can take as stored and still hold an image for a
// disk of capacity bytes: zstd and gzip add at most 1/256 to what they cannot compress,
// a qcow2's tables at most 1/50 (with clusters of 512 bytes), and their headers a few
// KiB. Without the catalog's size, what decodes to nothing (zstd's skippable frames,
// empty gzip members, a qcow2's tail) would otherwise be read until the step's time ran
// out.
func maxArtifact(capacity int64) int64 {
	return capacity + capacity/32 + 16<<20
}
