package boot

import (
	"bytes"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/boot/grub"
	"github.com/better-compute/better-compute/boot/tftp"
)

// The TFTP names of the signed chain's loaders. shim loads the file named grubx64.efi
// from the directory it was itself loaded from.
const (
	shimName = "secureboot/shimx64.efi"
	grubName = "secureboot/grubx64.efi"
)

// signed reports whether the server has the signed chain to hand out: both ShimFile and
// GRUBFile are regular files.
func (s *Server) signed() bool {
	for _, f := range []string{s.cfg.ShimFile, s.cfg.GRUBFile} {
		if st, err := os.Stat(f); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// chainFile opens what the TFTP server serves beside ipxeDir for the signed chain:
// shim and GRUB as configured; GRUB's first configuration (grub.EntryName), which loads
// the machine's own; the machine's own, boot/<mac>.grub, as client gets it; and the files
// of ramdiskDir below ramdisk/, which that configuration names. ok is false for any
// other name.
func (s *Server) chainFile(name string, client net.Addr) (f io.ReadSeekCloser, ok bool, err error) {
	switch {
	case name == shimName:
		f, err = os.Open(s.cfg.ShimFile)
	case name == grubName:
		f, err = os.Open(s.cfg.GRUBFile)
	case name == grub.EntryName:
		f = nopCloser{strings.NewReader(grub.Entry)}
	case strings.HasPrefix(name, "ramdisk/"):
		f, err = tftp.Open(s.ramdiskRoot, strings.TrimPrefix(name, "ramdisk/"))
	case strings.HasPrefix(name, "boot/") && strings.HasSuffix(name, ".grub"):
		var b []byte
		if b, err = s.grubConfig(strings.TrimSuffix(strings.TrimPrefix(name, "boot/"), ".grub"), client); err == nil {
			f = nopCloser{bytes.NewReader(b)}
		}
	default:
		return nil, false, nil
	}
	if f == nil && err == nil {
		err = fs.ErrNotExist
	}
	return f, true, err
}

// grubConfig renders the GRUB configuration of the machine spelled mac, as GRUB asks by
// TFTP from client, to the address the machine holds only (boundScript); a nil client
// (the TFTP port's check of the name) gets nothing. A machine without an entry is
// reported for discovery and told to wait and ask again; so is one whose entry can not
// go into a configuration, which is logged.
func (s *Server) grubConfig(name string, client net.Addr) ([]byte, error) {
	mac, err := net.ParseMAC(name)
	if err != nil || !dhcp.MachineMAC(mac) {
		return nil, fs.ErrNotExist // no discovery either: it names no machine
	}
	if client == nil {
		return nil, nil
	}
	var from netip.Addr
	if u, ok := client.(*net.UDPAddr); ok {
		from = u.AddrPort().Addr()
	}
	script := s.boundScript(mac, from, "tftp")
	out, err := grub.Render(script, s.tftpPath)
	if err != nil {
		s.log.Error("boot entry can not be rendered for GRUB; the machine waits", "mac", mac.String(), "err", err)
		out, err = grub.Render(s.waitScript(mac), s.tftpPath)
	}
	return out, err
}

// tftpPath is the TFTP path of a URL of ramdiskDir's file: chainFile serves them at
// the same path as HTTP. Other URLs (the site cache's extra initrds) have none.
func (s *Server) tftpPath(url string) (string, bool) {
	name, ok := strings.CutPrefix(url, s.baseURL+"/ramdisk/")
	return "/ramdisk/" + name, ok
}

// nopCloser is a ReadSeeker whose Close does nothing.
type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }
