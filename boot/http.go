package boot

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/boot/ipxe"
	"github.com/better-compute/better-compute/boot/tftp"
)

// routes are the HTTP paths the boot server answers.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot/{script}", s.serveScript)
	mux.Handle("GET /ramdisk/{file...}", serveFiles(s.ramdiskRoot, "file"))
	mux.Handle("GET /ipxe/{file...}", serveFiles(s.ipxeRoot, "file"))
	for pattern, h := range s.extra {
		mux.Handle(pattern, h)
	}
	return mux
}

// serveScript answers /boot/<mac>.ipxe with the machine's script. A machine without an
// entry is reported for discovery and told to wait and ask again; so is one whose entry
// holds a value that can not go into a script, which is logged as an error.
func (s *Server) serveScript(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("script"), ".ipxe")
	if !ok {
		http.NotFound(w, r)
		return
	}
	mac, err := net.ParseMAC(strings.ReplaceAll(name, "-", ":"))
	if err != nil || len(mac) != 6 {
		http.Error(w, "not a MAC address: "+name, http.StatusNotFound)
		return
	}
	script := s.script(mac)
	out, err := ipxe.Render(script)
	if err != nil {
		s.log.Error("boot entry can not be rendered; the machine waits", "mac", mac.String(), "err", err)
		script = ipxe.Script{Kind: ipxe.Wait, MAC: mac.String(), Self: script.Self, Retry: time.Duration(s.cfg.RetryInterval)}
		out, _ = ipxe.Render(script)
	}
	s.log.Info("ipxe script", "mac", mac.String(), "kind", string(script.Kind))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(out)
}

// script is the script a machine gets now.
func (s *Server) script(mac net.HardwareAddr) ipxe.Script {
	sc := ipxe.Script{MAC: mac.String(), Self: s.baseURL + dhcp.ScriptPath(mac), Retry: time.Duration(s.cfg.RetryInterval)}
	e, ok := s.entries.Entry(mac)
	if !ok {
		s.discover.record(Discovery{MAC: mac, Source: "http"})
		sc.Kind = ipxe.Wait
		return sc
	}
	switch e.Kind {
	case KindRamdisk:
		sc.Kind = ipxe.Ramdisk
		sc.Kernel = s.ramdiskURL(e.Ramdisk.Kernel)
		sc.Initrd = s.ramdiskURL(e.Ramdisk.Initrd)
		sc.Extras = e.Ramdisk.Extras
		sc.Args = e.Ramdisk.CommandLine()
	case KindDisk:
		sc.Kind = ipxe.Disk
	case KindSanboot:
		sc.Kind = ipxe.Sanboot
		sc.ISO = e.ISO
	default:
		sc.Kind = ipxe.Kind(e.Kind) // refused by Render
	}
	return sc
}

// ramdiskURL is the URL of a ramdisk file: a URL as it is, a name under /ramdisk/.
func (s *Server) ramdiskURL(name string) string {
	if strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://") || name == "" {
		return name
	}
	return s.baseURL + "/ramdisk/" + name
}

// serveFiles serves the regular files under root, with Range and conditional requests,
// never anything outside it.
func serveFiles(root *os.Root, param string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := tftp.Open(root, r.PathValue(param))
		if err != nil {
			status := http.StatusForbidden
			if errors.Is(err, fs.ErrNotExist) {
				status = http.StatusNotFound
			}
			http.Error(w, http.StatusText(status), status)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
}
