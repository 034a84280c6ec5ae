package qcow2

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Sink receives the guest disk: its size first, then its contents in whatever order
// the image stores them. Every byte of the guest disk is either written or zeroed
// exactly once.
type Sink interface {
	Begin(size int64) error
	WriteAt(p []byte, off int64) error
	Zero(off, n int64) error
}

// Limits bound the memory a conversion may take.
type Limits struct {
	// Pending is how many bytes of clusters may wait in memory for the table that
	// places them (default 64 MiB).
	Pending int64
	// Ahead is how many data clusters may be known before they stream past (default
	// 4 Mi, about 200 MiB of map).
	Ahead int
}

func (l Limits) withDefaults() Limits {
	if l.Pending == 0 {
		l.Pending = 64 << 20
	}
	if l.Ahead == 0 {
		l.Ahead = 4 << 20
	}
	return l
}

// Table entry bits.
const (
	offsetMask     = 0x00fffffffffffe00
	flagCompressed = 1 << 62
	flagZero       = 1 << 0
)

// converter is one conversion's state.
type converter struct {
	h    Header
	cs   int64
	sink Sink
	lim  Limits

	// pos is the host offset of the next cluster to stream past.
	pos int64
	l1  []byte
	// l2 maps a host cluster not yet seen to the L1 indexes whose table it is.
	l2 map[int64][]int64
	// data maps a host cluster not yet seen to the guest offsets it holds.
	data map[int64][]int64
	// pending keeps clusters whose role was unknown when they streamed past.
	pending      map[int64][]byte
	pendingBytes int64
	l1Done       bool
}

// Convert reads a qcow2 image from r to its end and writes the guest disk to sink.
func Convert(r io.Reader, sink Sink, lim Limits) (Header, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	first := make([]byte, headerLen)
	n, err := io.ReadFull(br, first)
	if err != nil && err != io.ErrUnexpectedEOF {
		return Header{}, fmt.Errorf("%w: reading the header: %v", ErrMalformed, err)
	}
	h, err := ParseHeader(first[:n])
	if err != nil {
		return Header{}, err
	}
	c := &converter{h: h, cs: h.ClusterSize(), sink: sink, lim: lim.withDefaults(),
		l2: map[int64][]int64{}, data: map[int64][]int64{}, pending: map[int64][]byte{}}
	if err := sink.Begin(int64(h.Size)); err != nil {
		return h, err
	}
	// The rest of cluster 0 holds header extensions, which change nothing here.
	if _, err := io.CopyN(io.Discard, br, c.cs-int64(n)); err != nil {
		return h, c.truncated(err)
	}
	c.pos = c.cs
	buf := make([]byte, c.cs)
	for {
		n, err := io.ReadFull(br, buf)
		if n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
			break
		}
		if err != nil && err != io.ErrUnexpectedEOF {
			return h, err
		}
		clear(buf[n:])
		if err := c.cluster(buf); err != nil {
			return h, err
		}
		c.pos += c.cs
	}
	if !c.l1Done || len(c.l2) > 0 || len(c.data) > 0 {
		return h, fmt.Errorf("%w: the image ends at %d before all its tables and data", ErrMalformed, c.pos)
	}
	return h, nil
}

func (c *converter) truncated(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: the image ends inside its first cluster", ErrMalformed)
	}
	return err
}

// cluster handles the cluster at host offset c.pos.
func (c *converter) cluster(buf []byte) error {
	known := false
	l1Start, l1End := int64(c.h.L1Offset), int64(c.h.L1Offset)+int64(c.h.L1Size)*8
	if c.pos < l1End && c.pos+c.cs > l1Start {
		known = true
		c.l1 = append(c.l1, buf[:min(c.cs, l1End-c.pos)]...)
		if c.pos+c.cs >= l1End {
			if err := c.parseL1(); err != nil {
				return err
			}
		}
	}
	if idx, ok := c.l2[c.pos]; ok {
		known = true
		delete(c.l2, c.pos)
		for _, i := range idx {
			if err := c.parseL2(i, buf); err != nil {
				return err
			}
		}
	}
	if guests, ok := c.data[c.pos]; ok {
		known = true
		delete(c.data, c.pos)
		for _, g := range guests {
			if err := c.write(buf, g); err != nil {
				return err
			}
		}
	}
	// Until every table is known, a cluster of no known role may be data whose table
	// comes later.
	if !known && (!c.l1Done || len(c.l2) > 0) {
		if c.pendingBytes+c.cs > c.lim.Pending {
			return fmt.Errorf("%w: more than %d bytes of clusters come before the tables that place them; "+
				"rewrite the image with `qemu-img convert -O qcow2`", ErrUnsupported, c.lim.Pending)
		}
		c.pending[c.pos] = append([]byte(nil), buf...)
		c.pendingBytes += c.cs
	}
	return nil
}

// parseL1 reads the complete L1 table: each entry names an L2 table, or none when that
// part of the guest disk is unallocated and reads as zeros.
func (c *converter) parseL1() error {
	span := c.h.l2Entries() * c.cs
	for i := range int64(c.h.L1Size) {
		guest := i * span
		if guest >= int64(c.h.Size) {
			break
		}
		off := int64(binary.BigEndian.Uint64(c.l1[i*8:]) & offsetMask)
		if off == 0 {
			if err := c.sink.Zero(guest, min(span, int64(c.h.Size)-guest)); err != nil {
				return err
			}
			continue
		}
		if off%c.cs != 0 {
			return fmt.Errorf("%w: L2 table at unaligned offset %d", ErrMalformed, off)
		}
		if off >= c.pos+c.cs {
			c.l2[off] = append(c.l2[off], i)
			continue
		}
		buf, ok := c.pending[off]
		if !ok {
			return fmt.Errorf("%w: L2 table at %d overlaps the header or the L1 table", ErrMalformed, off)
		}
		if err := c.parseL2(i, buf); err != nil {
			return err
		}
	}
	c.l1, c.l1Done = nil, true
	c.dropPending()
	return nil
}

// parseL2 reads the L2 table of L1 entry i.
func (c *converter) parseL2(i int64, table []byte) error {
	n := c.h.l2Entries()
	zeroFrom := int64(-1)
	flushZero := func(to int64) error {
		if zeroFrom < 0 {
			return nil
		}
		from := zeroFrom
		zeroFrom = -1
		return c.sink.Zero(from, min(to, int64(c.h.Size))-from)
	}
	for j := range n {
		guest := (i*n + j) * c.cs
		if guest >= int64(c.h.Size) {
			break
		}
		e := binary.BigEndian.Uint64(table[j*8:])
		if e&flagCompressed != 0 {
			return fmt.Errorf("%w: compressed clusters; rewrite the image without -c", ErrUnsupported)
		}
		off := int64(e & offsetMask)
		if off == 0 || (c.h.Version >= 3 && e&flagZero != 0) {
			if zeroFrom < 0 {
				zeroFrom = guest
			}
			continue
		}
		if err := flushZero(guest); err != nil {
			return err
		}
		if off%c.cs != 0 {
			return fmt.Errorf("%w: data cluster at unaligned offset %d", ErrMalformed, off)
		}
		if off >= c.pos+c.cs {
			if len(c.data) >= c.lim.Ahead {
				return fmt.Errorf("%w: more than %d data clusters mapped ahead of the stream", ErrUnsupported, c.lim.Ahead)
			}
			c.data[off] = append(c.data[off], guest)
			continue
		}
		buf, ok := c.pending[off]
		if !ok {
			return fmt.Errorf("%w: data cluster at %d overlaps the image's metadata", ErrMalformed, off)
		}
		if err := c.write(buf, guest); err != nil {
			return err
		}
	}
	if err := flushZero((i + 1) * n * c.cs); err != nil {
		return err
	}
	c.dropPending()
	return nil
}

// dropPending forgets the kept clusters once every table is known: what no table
// placed is not guest data.
func (c *converter) dropPending() {
	if c.l1Done && len(c.l2) == 0 {
		clear(c.pending)
		c.pendingBytes = 0
	}
}

// write places one data cluster, cut at the end of the guest disk.
func (c *converter) write(buf []byte, guest int64) error {
	return c.sink.WriteAt(buf[:min(c.cs, int64(c.h.Size)-guest)], guest)
}
