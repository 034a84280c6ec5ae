package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"sync"
	"sync/atomic"
)

// The hashed stream's geometry: chunks large enough that the hand-offs cost nothing,
// few enough that memory stays small.
const (
	chunkSize = 1 << 20
	chunks    = 8
)

// hashedStream is the artifact as stored, read from the network on one goroutine and
// hashed on another while the decoder reads the same chunks: the digest costs the
// decoding goroutine nothing, and every byte read is hashed exactly once, in order.
type hashedStream struct {
	data  chan *chunk
	hashq chan *chunk
	free  chan *chunk
	stop  chan struct{}
	once  sync.Once

	cur *chunk
	pos int

	readDone chan struct{}
	hashDone chan struct{}
	mu       sync.Mutex
	err      error // the source's error other than EOF, set before data closes
	h        hash.Hash
	n        atomic.Int64
}

type chunk struct {
	buf  []byte
	n    int
	refs atomic.Int32
}

func newHashedStream(src io.Reader) *hashedStream {
	s := &hashedStream{
		data: make(chan *chunk, chunks), hashq: make(chan *chunk, chunks), free: make(chan *chunk, chunks),
		stop: make(chan struct{}), readDone: make(chan struct{}), hashDone: make(chan struct{}), h: sha256.New(),
	}
	for range chunks {
		s.free <- &chunk{buf: make([]byte, chunkSize)}
	}
	go s.read(src)
	go s.hash()
	return s
}

func (s *hashedStream) read(src io.Reader) {
	defer close(s.readDone)
	defer close(s.hashq)
	defer close(s.data)
	for {
		var c *chunk
		select {
		case c = <-s.free:
		case <-s.stop:
			return
		}
		n, err := io.ReadFull(src, c.buf)
		if n > 0 {
			c.n = n
			c.refs.Store(2)
			s.n.Add(int64(n))
			s.hashq <- c
			s.data <- c
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return
		}
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
	}
}

func (s *hashedStream) hash() {
	defer close(s.hashDone)
	for c := range s.hashq {
		s.h.Write(c.buf[:c.n])
		s.release(c)
	}
}

func (s *hashedStream) release(c *chunk) {
	if c.refs.Add(-1) == 0 {
		s.free <- c
	}
}

// Read hands out the stream's bytes in order; at the end it returns io.EOF, or the
// source's error.
func (s *hashedStream) Read(p []byte) (int, error) {
	if s.cur == nil {
		c, ok := <-s.data
		if !ok {
			if err := s.Err(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		s.cur, s.pos = c, 0
	}
	n := copy(p, s.cur.buf[s.pos:s.cur.n])
	s.pos += n
	if s.pos == s.cur.n {
		s.release(s.cur)
		s.cur = nil
	}
	return n, nil
}

// Err is the source's error other than EOF, if it has happened.
func (s *hashedStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// BytesRead is how many bytes came from the source so far.
func (s *hashedStream) BytesRead() int64 { return s.n.Load() }

// Sum is the lower-case hex SHA-256 of every byte read; call it after Read returned
// io.EOF.
func (s *hashedStream) Sum() string {
	<-s.hashDone
	return hex.EncodeToString(s.h.Sum(nil))
}

// Close stops the reading goroutine and waits for it. The source must be aborted first
// if a read from it may block.
func (s *hashedStream) Close() {
	s.once.Do(func() { close(s.stop) })
	if s.cur != nil {
		s.release(s.cur)
		s.cur = nil
	}
	for c := range s.data {
		s.release(c)
	}
	<-s.readDone
	<-s.hashDone
}
