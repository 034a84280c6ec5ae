package measuredboot

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-attestation/attest"

	"github.com/better-compute/better-compute/proto"
)

// The event types decode describes (TCG PC Client Platform Firmware Profile, 10.4.1).
const (
	evPostCode          = 0x00000001
	evSeparator         = 0x00000004
	evAction            = 0x00000005
	evSCRTMVersion      = 0x00000008
	evIPL               = 0x0000000D
	evEFIVariableConfig = 0x80000001
	evEFIVariableBoot   = 0x80000002
	evEFIBootServices   = 0x80000003
	evEFIBootDriver     = 0x80000004
	evEFIRuntimeDriver  = 0x80000005
	evEFIAction         = 0x80000007
	evEFIVariableAuth   = 0x800000E0
)

// maxDescription bounds what decode quotes of an event's data.
const maxDescription = 200

// decode turns an event into what people read: its type's name, its digest and, where its
// data says, what it measured. The data is the firmware's and untrusted: it only names
// the event, the digest is what is compared.
func decode(e attest.Event) proto.BootEvent {
	return proto.BootEvent{PCR: e.Index, Type: e.Type.String(), Digest: hex.EncodeToString(e.Digest), Description: describeData(uint32(e.Type), e.Data)}
}

func describeData(typ uint32, data []byte) string {
	switch typ {
	case evSeparator:
		return ""
	case evPostCode, evAction, evEFIAction, evIPL:
		return printable(bytes.TrimRight(data, "\x00"))
	case evSCRTMVersion:
		return utf16String(data)
	case evEFIVariableConfig, evEFIVariableBoot, evEFIVariableAuth:
		return variableName(data)
	case evEFIBootServices, evEFIBootDriver, evEFIRuntimeDriver:
		return imagePath(data)
	}
	return ""
}

// variableName reads a UEFI_VARIABLE_DATA's name: GUID (16), name length in characters
// (8), data length (8), then the name in UTF-16.
func variableName(data []byte) string {
	if len(data) < 32 {
		return ""
	}
	n := binary.LittleEndian.Uint64(data[16:24])
	if n > uint64(len(data)-32)/2 {
		return ""
	}
	return "variable " + utf16String(data[32:32+2*n])
}

// imagePath reads the file path of a UEFI_IMAGE_LOAD_EVENT's device path: four 8-byte
// fields, the device path's length being the last, then the path, whose media file path
// nodes (type 4, subtype 4) name the file.
func imagePath(data []byte) string {
	if len(data) < 32 {
		return ""
	}
	n := binary.LittleEndian.Uint64(data[24:32])
	if n > uint64(len(data)-32) {
		return ""
	}
	var parts []string
	for p := data[32 : 32+n]; len(p) >= 4; {
		l := int(binary.LittleEndian.Uint16(p[2:4]))
		if l < 4 || l > len(p) {
			break
		}
		if p[0] == 4 && p[1] == 4 {
			parts = append(parts, utf16String(p[4:l]))
		}
		p = p[l:]
	}
	if len(parts) == 0 {
		return "image from a device path without a file"
	}
	return "image " + strings.Join(parts, "")
}

func utf16String(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return printable([]byte(string(utf16.Decode(u))))
}

// printable keeps a description readable and short: invalid UTF-8 and control
// characters become '?', and it ends after maxDescription bytes.
func printable(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 && sb.Len() < maxDescription {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		sb.WriteRune(r)
		b = b[size:]
	}
	if len(b) > 0 {
		sb.WriteString("…")
	}
	return sb.String()
}
