// Package qcow2 converts a qcow2 image to the raw disk it describes while the image
// streams past, in one pass and without staging it: the header, the L1 table and each
// L2 table are read as they go by, and every data cluster is written to its guest offset
// the moment its place is known.
//
// A data cluster that comes before the L2 table that maps it (and anything that comes
// before the L1 table) is kept in memory until its table arrives, up to a limit; images
// written by `qemu-img convert` put each L2 table before the clusters it maps, so
// nothing is kept. Compressed clusters, backing files, encryption, external data files
// and extended L2 entries are refused with ErrUnsupported.
package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrUnsupported marks an image that is valid qcow2 but uses a feature the converter
// does not handle.
var ErrUnsupported = errors.New("qcow2 feature not supported")

// ErrMalformed marks bytes that are not a consistent qcow2 image.
var ErrMalformed = errors.New("malformed qcow2 image")

// Magic starts every qcow2 image: "QFI\xfb".
const Magic = 0x514649fb

// Header is what the converter uses of a qcow2 header.
type Header struct {
	Version     uint32
	ClusterBits uint32
	// Size is the guest disk's size in bytes.
	Size     uint64
	L1Size   uint32
	L1Offset uint64
}

// ClusterSize is the size of one cluster in bytes.
func (h Header) ClusterSize() int64 { return 1 << h.ClusterBits }

// l2Entries is how many entries one L2 table holds.
func (h Header) l2Entries() int64 { return h.ClusterSize() / 8 }

// Clusters is how many clusters the guest disk spans.
func (h Header) Clusters() int64 {
	cs := uint64(h.ClusterSize())
	return int64((h.Size + cs - 1) / cs)
}

// headerLen is the part of the header ParseHeader reads: version 3's fixed fields.
const headerLen = 104

// The limits a header must keep to.
const (
	minClusterBits = 9
	maxClusterBits = 21
	// maxL1Bytes is the largest L1 table accepted, as qemu itself enforces.
	maxL1Bytes = 32 << 20
	// maxClusters bounds the guest disk: 128 TiB with the default 64 KiB clusters.
	maxClusters = 1 << 31
)

// The v3 incompatible feature bits.
const (
	featureDirty        = 1 << 0
	featureCorrupt      = 1 << 1
	featureExternalData = 1 << 2
	featureCompression  = 1 << 3
	featureExtendedL2   = 1 << 4
)

// ParseHeader checks and reads the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < 72 {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrMalformed, len(b))
	}
	be := binary.BigEndian
	if be.Uint32(b) != Magic {
		return Header{}, fmt.Errorf("%w: no qcow2 magic", ErrMalformed)
	}
	h := Header{
		Version:     be.Uint32(b[4:]),
		ClusterBits: be.Uint32(b[20:]),
		Size:        be.Uint64(b[24:]),
		L1Size:      be.Uint32(b[36:]),
		L1Offset:    be.Uint64(b[40:]),
	}
	switch h.Version {
	case 2:
	case 3:
		if len(b) < headerLen {
			return Header{}, fmt.Errorf("%w: version 3 header of %d bytes", ErrMalformed, len(b))
		}
		incompatible := be.Uint64(b[72:])
		switch {
		case incompatible&featureCorrupt != 0:
			return Header{}, fmt.Errorf("%w: the image is marked corrupt", ErrMalformed)
		case incompatible&featureExternalData != 0:
			return Header{}, fmt.Errorf("%w: external data file", ErrUnsupported)
		case incompatible&featureExtendedL2 != 0:
			return Header{}, fmt.Errorf("%w: extended L2 entries (subclusters)", ErrUnsupported)
		case incompatible&^(featureDirty|featureCompression) != 0:
			return Header{}, fmt.Errorf("%w: incompatible features %#x", ErrUnsupported, incompatible)
		}
	default:
		return Header{}, fmt.Errorf("%w: version %d", ErrUnsupported, h.Version)
	}
	if be.Uint64(b[8:]) != 0 {
		return Header{}, fmt.Errorf("%w: backing file", ErrUnsupported)
	}
	if be.Uint32(b[32:]) != 0 {
		return Header{}, fmt.Errorf("%w: encryption", ErrUnsupported)
	}
	if h.ClusterBits < minClusterBits || h.ClusterBits > maxClusterBits {
		return Header{}, fmt.Errorf("%w: cluster bits %d", ErrMalformed, h.ClusterBits)
	}
	if h.Size == 0 || h.Size > uint64(maxClusters)<<h.ClusterBits {
		return Header{}, fmt.Errorf("%w: a guest disk of %d bytes", ErrUnsupported, h.Size)
	}
	need := (h.Clusters() + h.l2Entries() - 1) / h.l2Entries()
	if int64(h.L1Size) < need || int64(h.L1Size)*8 > maxL1Bytes {
		return Header{}, fmt.Errorf("%w: L1 table of %d entries for %d needed", ErrMalformed, h.L1Size, need)
	}
	if h.L1Offset == 0 || h.L1Offset%uint64(h.ClusterSize()) != 0 || h.L1Offset > 1<<56 {
		return Header{}, fmt.Errorf("%w: L1 table at %d", ErrMalformed, h.L1Offset)
	}
	return h, nil
}
