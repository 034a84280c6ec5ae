package proto

import (
	"encoding/binary"
	"errors"
	"io"
)

// The agent plane's framing on a QUIC stream: each frame is a 4-byte big-endian payload
// length, then that many bytes of one JSON-encoded Message.
const (
	// MaxFrame bounds a frame's payload. A larger length is an error and the stream is
	// abandoned: nothing in the agent plane needs more (a site's plan is bounded, and a
	// site agent cuts each inventory section to a budget, SiteInventory.Omitted).
	MaxFrame = 4 << 20
	// frameChunk is how much of a frame is read at a time, so memory follows the bytes
	// that actually arrive, not the length a peer announces.
	frameChunk = 64 << 10
)

// PingFrame is the frame of a ping as WriteMessage writes it: the length, then
// {"type":"ping"}. An agent sends it every keep-alive period, so a receiver may take
// these exact bytes for a ping without decoding them (the registry does, for each of
// its fleet's pings); any other encoding of a ping is decoded as usual.
const PingFrame = "\x00\x00\x00\x0f" + `{"type":"ping"}`

// ErrFrameTooLarge is returned for a frame whose announced length exceeds MaxFrame.
var ErrFrameTooLarge = errors.New("agent frame larger than proto.MaxFrame")

// ReadFrame reads one frame and returns its payload. It returns io.EOF only when the
// stream ends cleanly between frames, io.ErrUnexpectedEOF when it ends inside one.
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > MaxFrame {
		return nil, ErrFrameTooLarge
	}
	buf := make([]byte, 0, min(n, frameChunk))
	for len(buf) < n {
		chunk := min(n-len(buf), frameChunk)
		buf = append(buf, make([]byte, chunk)...)
		if _, err := io.ReadFull(r, buf[len(buf)-chunk:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// ReadMessage reads one frame and decodes its message.
func ReadMessage(r io.Reader) (Message, error) {
	b, err := ReadFrame(r)
	if err != nil {
		return Message{}, err
	}
	return DecodeMessage(b)
}

// WriteMessage writes m as one frame with a single Write.
func WriteMessage(w io.Writer, m *Message) error {
	body, err := Marshal(m)
	if err != nil {
		return err
	}
	return WriteFrame(w, body)
}

// WriteFrame writes body, a message Marshal encoded, as one frame with a single Write:
// ErrFrameTooLarge, and nothing written, when it takes more than MaxFrame. A sender that
// must tell a message too large from a failed link (the registry's relay) measures the
// body first.
func WriteFrame(w io.Writer, body []byte) error {
	if len(body) > MaxFrame {
		return ErrFrameTooLarge
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	_, err := w.Write(append(frame, body...))
	return err
}
