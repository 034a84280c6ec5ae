package image

import (
	"strings"

	"github.com/better-compute/better-compute/registry/store"
)

// signingVersion is the first line of every signing input; a new layout gets a new one.
const signingVersion = "bc-image-v1"

// SigningInput is the exact bytes an image's signature covers: UTF-8 lines, each ended
// by a line feed (the last one too), of "bc-image-v1", the kind, the ref, the format,
// the compression and the lower-case hex digest. The source and size are not signed:
// the digest pins the artifact wherever it is pulled from.
func SigningInput(img store.Image) []byte {
	lines := []string{signingVersion, string(img.Kind), img.Ref, string(img.Format), string(img.Compression), strings.ToLower(img.SHA256)}
	return []byte(strings.Join(lines, "\n") + "\n")
}
